"""One agent tool call, or one message to the user, as a step of an env: for hosts that call tools one at a time
(MCP clients, TRL's environment hook) instead of writing whole turns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# The agent's turn to the user, offered beside the world's tools where the host has no chat channel of its own.
USER_TOOL = "send_message_to_user"
USER_TOOL_DESCRIPTION = ("Say something to the user; the result is the user's reply. Write ###STOP### to end the "
                         "conversation.")
USER_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"message": {"type": "string", "description": "What to say to the user."}},
    "required": ["message"],
    "additionalProperties": False,
}


@dataclass
class TurnResult:
    """What one call produced: the text the agent sees, whether it is an error, and the step's own results."""

    text: str
    is_error: bool
    reward: float
    ended: bool
    info: dict[str, Any] = field(default_factory=dict)


def step_tool_call(env: Any, name: str, arguments: dict[str, Any], call_id: str) -> TurnResult:
    """Step `env` (a ToolWorldEnv) with one call of tool `name`, or with a message to the user when `name` is
    `USER_TOOL`. The text is what the env answered after the agent's own message: the tool's result (guarded,
    delimited) or the user's reply."""
    if name == USER_TOOL:
        action: Any = str(arguments.get("message", ""))
    else:
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        action = {"role": "assistant", "content": None, "tool_calls": [call]}
    seen = len(env.messages)
    _, reward, terminated, truncated, info = env.step(action)
    answer = info["messages"][seen + 1:]
    text = "\n".join(str(m.get("content") or "") for m in answer) or "(the conversation has ended)"
    return TurnResult(text, bool(info.get("tool_errors")), float(reward), bool(terminated or truncated), info)
