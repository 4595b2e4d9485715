"""The typed wire of an envgym world in OpenEnv: one action (the agent's turn), one observation, one state."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, Field


class EnvgymToolCall(BaseModel):
    """One tool call of the agent's turn."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class EnvgymAction(Action):
    """The agent's turn: text (which may hold tool calls in any format envgym reads) and/or typed tool calls.
    A turn without tool calls is a reply to the user."""

    content: str = ""
    tool_calls: list[EnvgymToolCall] = Field(default_factory=list)


class EnvgymObservation(Observation):
    """What a step returns. `messages` are the conversation's new messages (the agent's own turn first, then tool
    results or the user's reply; at reset the system prompt and the user's opening). The grade fields are set when
    the episode ends (`done`)."""

    text: str = ""
    env_name: str = ""
    task_id: str = ""
    step: int = 0
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI tool schemas (at reset)")
    tool_errors: list[str | None] = Field(default_factory=list)
    truncated: bool = False
    reward_components: dict[str, float] = Field(default_factory=dict)
    state_hash: str | None = None
    tool_call_rewards: list[dict[str, Any]] = Field(default_factory=list)
    guard: list[dict[str, Any]] = Field(default_factory=list)


class EnvgymState(State):
    """The episode's bookkeeping: which world and task, and the canonical hash of the world state now."""

    env_name: str = ""
    task_id: str | None = None
    world_hash: str | None = None
    done: bool = True
