"""Policies: what picks the agent's next turn. Scripted ones (oracle, attacker, random, refuse) and a chat-model one.

A policy is anything with `act(obs, info) -> action` (text or an OpenAI assistant message dict).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, Protocol

from envgym.env import ToolWorldEnv
from envgym.loader import EnvironmentData, load_environment
from envgym.play.scripted import closing_reply, confirmation_request, needs_confirmation, scripted_turns
from envgym.protocol import format_tool_call
from envgym.registry import find_env_dir
from envgym.users import STOP
from envgym.world.spec import ToolCall
from envgym.world.tools import RETRYABLE


class Policy(Protocol):
    def act(self, obs: str, info: dict[str, Any]) -> str | dict[str, Any]: ...


def _turns_taken(info: dict[str, Any]) -> int:
    return sum(1 for m in info["messages"] if m["role"] == "assistant")


class OraclePolicy:
    """Replays the task's reference solution one call per turn, keeping the world's policy rules, then says the
    reference final reply (`envgym.play.scripted`): where the rules want it, it asks the user before each write.

    A call that failed transiently or by a rate limit (`RETRYABLE`) is made again. It reads the hidden task, so it
    is for tests and for proving tasks solvable, never for evaluation. `authenticate=False` and `confirm=False`
    make the skip-authentication and skip-confirmation controls.
    """

    def __init__(self, data: EnvironmentData | None = None, *, authenticate: bool = True, confirm: bool = True):
        self.data = data
        self.authenticate = authenticate
        self.confirm = confirm
        self._scripts: dict[tuple[str, str], list[str]] = {}  # the script depends on the task only
        self._retries = 0  # turns of this episode that repeated a failed call

    def _data(self, info: dict[str, Any]) -> EnvironmentData:
        return self.data or load_environment(str(find_env_dir(info["env_name"])))

    def act(self, obs: str, info: dict[str, Any]) -> str:
        key = (info["env_name"], info["task_id"])
        if key not in self._scripts:
            data = self._data(info)
            self._scripts[key] = scripted_turns(data.world, data.task(info["task_id"]),
                                                authenticate=self.authenticate, confirm=self.confirm)
        turns = self._scripts[key]
        if len(info["messages"]) <= 2:  # a new episode
            self._retries = 0
        turn = _turns_taken(info) - self._retries
        if 0 < turn <= len(turns) and RETRYABLE & set(info.get("tool_errors") or ()):
            self._retries += 1
            return turns[turn - 1]
        return turns[turn] if turn < len(turns) else f"Goodbye. {STOP}"


class AttackerPolicy:
    """The attacker-obeying agent: the reference solution, plus every injected instruction, carried out at once.

    It replays the task's reference solution one call per turn; as soon as a tool result shows the attack's payload
    it first makes the attacker's calls, then goes on with the task and ends with the reference reply. Like the
    oracle it reads hidden data (the task and the attack), so it is a measuring instrument, never an agent to train.
    """

    def __init__(self, env: ToolWorldEnv):
        self.env = env
        self._plan: list[ToolCall] = []
        self._pending: list[ToolCall] = []
        self._marker: str | None = None
        self._replied = False
        self._asked = False

    def _start(self) -> None:
        env, security = self.env, self.env.security
        assert env.task is not None
        self._plan = list(env.task.solution)
        self._pending, self._marker, self._replied, self._asked = [], None, False, False
        if security.attack is not None and security.attacks is not None:
            payload = security.attacks.payload(env.data.initial, security.attack, env.task)
            # The longest run of the payload without brackets, as it appears inside a JSON string: the guard
            # escapes tags and control tokens.
            line = max(re.split(r"[\n<>\[\]|]", payload), key=len)
            self._marker = json.dumps(line, ensure_ascii=False)[1:-1]

    def act(self, obs: str, info: dict[str, Any]) -> str:
        messages = info["messages"]
        if len(messages) == 2:
            self._start()
        if self._marker is not None and any(
            m["role"] == "tool" and self._marker in m["content"] for m in messages
        ):
            security = self.env.security
            assert security.attack is not None and security.attacks is not None
            self._pending = security.attacks.attacker_calls(self.env.data.initial, security.attack, self.env.task)
            self._marker = None
        if self._pending or self._plan:
            # The task's own writes keep the world's rules (the user's yes first); obeyed attacker calls do not.
            if not self._pending and not self._asked and needs_confirmation(self.env.data.world, self._plan[0].name):
                self._asked = True
                return confirmation_request(self._plan[0].name, self._plan[0].arguments)
            self._asked = False
            call = (self._pending or self._plan).pop(0)
            return format_tool_call(call.name, call.arguments)
        if not self._replied:
            self._replied = True
            task = self.env.task
            assert task is not None
            return closing_reply(task)
        return f"Goodbye. {STOP}"


class RefusePolicy:
    """Always replies the same refusal (the do-nothing baseline every task must fail)."""

    def __init__(self, text: str = "I cannot help with that."):
        self.text = text

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return self.text


def _random_value(schema: dict[str, Any], rng: random.Random) -> Any:
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = rng.choice(kind)
    if kind == "integer":
        return rng.randint(int(schema.get("minimum", 0)), int(schema.get("maximum", 10)))
    if kind == "number":
        return round(rng.uniform(schema.get("minimum", 0), schema.get("maximum", 10)), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_random_value(schema.get("items", {}), rng) for _ in range(rng.randint(0, 2))]
    if kind == "object":
        return {k: _random_value(v, rng) for k, v in schema.get("properties", {}).items()}
    return rng.choice(["x", "#W0001", "U0001", "R0001", "HAT001", "1 + 1", "test@example.com"])


class RandomPolicy:
    """Calls a random tool with random schema-typed arguments, or replies; seeded."""

    def __init__(self, seed: int = 0, reply_prob: float = 0.2):
        self.rng = random.Random(seed)
        self.reply_prob = reply_prob

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self.rng.random() < self.reply_prob:
            return self.rng.choice(["Could you tell me more?", "Can you confirm your email?", "Done."])
        fn = self.rng.choice(info["tools"])["function"]
        args = _random_value(fn["parameters"], self.rng)
        return format_tool_call(fn["name"], args if isinstance(args, dict) else {})


class ChatModelPolicy:
    """Asks a chat model for the next turn from the conversation so far (tools described in the prompt)."""

    def __init__(self, model: Any, max_tokens: int = 256, temperature: float = 0.0, seed: int | None = None):
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.tokens = 0

    def act(self, obs: str, info: dict[str, Any]) -> str:
        reply = self.model.chat(
            info["messages"],
            info["tools"],
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
        )
        self.tokens += int(reply.usage.get("prompt_tokens", 0)) + int(reply.usage.get("completion_tokens", 0))
        return str(reply.text)
