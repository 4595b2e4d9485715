"""`ToolWorldEnv`: a Gymnasium environment in which an LLM agent uses tools over a stateful world to help a user.

The contract
------------
``reset(seed=None, options=None) -> (observation, info)``
    Starts an episode on a fresh copy of the world's initial state with one task: ``options["task_id"]``, else the
    task fixed at construction (``task=``), else one drawn from the env's RNG. The observation is text: the system
    prompt (with the tools) and the user's first message. ``info["messages"]`` is the whole conversation in OpenAI
    chat format, ``info["tools"]`` the OpenAI tool schemas and ``info["task_id"]`` the task.

``step(action) -> (observation, reward, terminated, truncated, info)``
    ``action`` is the agent's turn: text, optionally with ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
    blocks, or an OpenAI assistant message dict with ``tool_calls``. Several calls run in order and each gets a
    tool message; the observation is those tool results. A turn without tool calls is a reply to the user and the
    observation is the user's answer. Any string is a legal action: a malformed call gets an error observation that
    names the problem and the episode goes on; an action longer than ``action_space.max_length`` is refused with an
    error observation (``info["action_error"] == "action_too_long"``), neither executed nor added to the conversation.
    Every text format of ``envgym.protocol`` is read (Hermes, Qwen3-Coder XML, pythonic, Mistral);
    ``tool_format="<name>"`` pins one, for parsing and for the text the env writes back.

    ``terminated`` is True when the user ends the conversation (goal met or patience lost) or the agent ends it by
    writing ``###STOP###``. ``truncated`` is True when ``max_steps`` turns have been taken. The reward is 0 until the
    episode ends; then it is the rubric's verdict (``info["reward_components"]``): 1.0 only if the final state equals
    the state the task's reference solution reaches, every env assertion holds, the task's answers were said without
    guessing, every required output was said and the trajectory kept the world's policy rules
    (``envgym.rewards.rubric``).

Per-tool-call rewards (``envgym.rewards.toolcalls``, on unless ``tool_rewards=False``)
    Each step's ``info["tool_calls"]`` labels its calls (valid, error kind, redundant repeat). At the end
    ``info["tool_call_rewards"]`` labels every call (valid, needed: its result was used or it moved the state toward
    the target, redundant, error) with a shaping value, summed in ``info["tool_call_shaping"]``; the episode reward
    adds ``tool_reward_weight`` times that sum (0 by default, so the reward stays the rubric's verdict).

Security (``envgym.guard``)
    The guard is on by default (``guard=False`` turns it off, a dict overrides the world's ``guard:`` settings). A
    call of an egress or destructive tool whose recipients, credentials or targets do not come from the user or
    trusted records, once untrusted data has been read, goes to ``confirm`` (``"deny"``, ``"user"`` or a callable);
    an unconfirmed call is not run and its tool result says why. Results of untrusted tools are wrapped in
    ``<untrusted_data>`` delimiters. ``attack="<goal>/<template>"`` (or ``options["attack"]``) plants a
    prompt-injection payload from the world's attack suite into the records the task reads; the payload reaches the
    agent only through tool results. At episode end ``info["attack"]`` says whether the attacker's goal was reached
    and ``info["guard"]`` lists the held calls.

The rubric, the reference solution and the attack's goal never appear in observations, tools or ``info``.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import string
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import shared_memory

from envgym.guard import (
    AttackSuite,
    Confirm,
    ConfirmationRequest,
    Guard,
    GuardConfig,
    GuardSession,
    serves_goal,
)
from envgym.loader import EnvironmentData, build_environment, load_environment
from envgym.protocol import (
    INVALID_CALL_NAME,
    ParsedCall,
    parse_action,
    renderer,
    tool_message,
)
from envgym.rewards.rubric import grade, replay_solution, total_reward
from envgym.rewards.toolcalls import (
    ToolCallRecord,
    ToolCallWeights,
    score_tool_calls,
    shaping_reward,
    state_distance,
)
from envgym.users import STOP, LLMUser, ScriptedUser, UserSimulator
from envgym.world.spec import TaskSpec, WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolResult, resolve_python

MAX_TEXT = 1 << 18


class TextSpace(spaces.Text):
    """Any string up to `max_length` characters (tool calls and replies are arbitrary unicode).

    `sample()` draws printable ASCII, as `gymnasium.spaces.Text` does; `contains` accepts every string, because an
    agent may write any text and the env must answer it.
    """

    def __init__(self, max_length: int = MAX_TEXT, sample_length: int = 64, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)
        self.sample_length = sample_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, self.sample_length + 1))
        return "".join(self.np_random.choice(list(string.printable), size=length))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


# AsyncVectorEnv passes observations through shared memory; Gymnasium's Text layout keeps only charset characters,
# so TextSpace stores unicode code points instead, ended by -1.
@shared_memory.create_shared_memory.register(TextSpace)
def _create_text_memory(space: TextSpace, n: int = 1, ctx: Any = multiprocessing) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@shared_memory.write_to_shared_memory.register(TextSpace)
def _write_text_memory(space: TextSpace, index: int, value: str, memory: Any) -> None:
    size = space.max_length + 1
    target = np.frombuffer(memory.get_obj(), dtype=np.int32)[index * size : (index + 1) * size]
    codes = np.frombuffer(value[: space.max_length].encode("utf-32-le"), dtype=np.int32)
    target[: len(codes)] = codes
    target[len(codes)] = -1


class _SharedTexts(Sequence[str]):
    """A live view of the texts in shared memory. AsyncVectorEnv reads its buffer once at start-up and deep-copies
    it on every step, so the view decodes on access and a deep copy is a plain tuple of the current texts."""

    def __init__(self, space: TextSpace, memory: Any, n: int):
        self._rows = np.frombuffer(memory.get_obj(), dtype=np.int32).reshape(n, space.max_length + 1)

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._rows[index]
        end = np.flatnonzero(row == -1)
        return row[: end[0] if len(end) else len(row) - 1].tobytes().decode("utf-32-le")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)


@shared_memory.read_from_shared_memory.register(TextSpace)
def _read_text_memory(space: TextSpace, memory: Any, n: int = 1) -> _SharedTexts:
    return _SharedTexts(space, memory, n)


class ToolWorldEnv(gym.Env[str, Any]):
    """A tool-use episode over a stateful world (see the module docstring for the contract)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012 (gymnasium declares it an instance attribute)

    def __init__(
        self,
        env_dir: str | Path | None = None,
        *,
        data: EnvironmentData | None = None,
        world: WorldSpec | None = None,
        tasks: list[TaskSpec] | None = None,
        task: str | None = None,
        max_steps: int | None = None,
        seed: int | None = None,
        failure_rate: float | None = None,
        user: str | Callable[[TaskSpec], UserSimulator] = "scripted",
        user_model: Any = None,
        render_mode: str | None = None,
        guard: bool | dict[str, Any] | GuardConfig | None = None,
        confirm: str | Confirm | None = None,
        attack: str | None = None,
        tool_rewards: bool = True,
        tool_reward_weight: float = 0.0,
        tool_format: str | None = None,
    ):
        if data is None:
            if env_dir is not None:
                data = load_environment(str(Path(env_dir).resolve()))
            elif world is not None:
                data = build_environment(world, tasks or [])
            else:
                raise ValueError("ToolWorldEnv needs env_dir, data, or world (+ tasks)")
        if not data.tasks:
            raise ValueError(f"environment {data.name!r} has no tasks")
        if task is not None:
            data.task(task)  # fail early on an unknown task id
        self.data = data
        self.fixed_task = task
        self.max_steps = max_steps
        self.failure_rate = data.world.failure_rate if failure_rate is None else failure_rate
        self.user_kind = user
        self.user_model = user_model
        self.render_mode = render_mode
        self.action_space = TextSpace()
        self.observation_space = TextSpace()
        self._default_seed = seed
        self._tools = data.executor.openai_tools()
        self._hooks = {
            name: resolve_python(data.directory, ref)
            for name, ref in data.world.hooks.model_dump().items()
            if ref is not None
        }
        self._setup_security(guard, confirm, attack)
        # Tool-call format: None reads every format and writes Hermes; a name pins both (envgym.protocol.FORMATS).
        self.tool_format = None if tool_format in (None, "auto") else tool_format
        self._renderer = renderer(self.tool_format)
        self._tools_prompt = self._renderer.tools_prompt(self._tools)  # the same text every reset
        self.tool_rewards = tool_rewards
        self.tool_reward_weight = tool_reward_weight
        self.tool_reward_weights = ToolCallWeights()
        self._write_tools = {t.name for t in data.world.tools if not t.read_only}
        self._system = self._system_prompt(data.world)
        self.state: WorldState | None = None
        self.task: TaskSpec | None = None
        self.messages: list[dict[str, Any]] = []
        self._done = True

    # ---------------------------------------------------------------- the Gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        if seed is None and self._default_seed is not None:
            seed, self._default_seed = self._default_seed, None
        super().reset(seed=seed)
        self._close_state()
        options = options or {}
        task_id = options.get("task_id") or options.get("task") or self.fixed_task
        if task_id is not None:
            self.task = self.data.task(str(task_id))
        else:
            self.task = self.data.tasks[int(self.np_random.integers(len(self.data.tasks)))]
        self._rng = random.Random(int(self.np_random.integers(2**63)))
        self.state = self.data.initial.copy()
        if "on_reset" in self._hooks:
            self._hooks["on_reset"](self.state, self.task, self._rng)
        self._start_security(options.get("attack", self.fixed_attack))
        self.user = self._make_user(self.task)
        self.steps = 0
        self.tool_results: list[ToolResult] = []
        self.tool_records: list[tuple[Any, ...]] = []
        self._seen_calls: set[tuple[str, str]] = set()  # calls made since the state last changed
        self._distance: int | None = None  # records differing from the target, known after the first write
        self._done = False
        self._started = time.perf_counter()
        self.messages = [
            {"role": "system", "content": self._system},
            {"role": "user", "content": self.user.opening()},
        ]
        obs = f"system: {self._system}\n\n{self._tools_prompt}\n\nuser: {self.messages[1]['content']}"
        return obs, self._info()

    def step(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._done or self.task is None or self.state is None:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, self._info()
        self.steps += 1
        self.step_calls: list[dict[str, Any]] = []
        # An oversized action is refused before parsing: not executed, not said, the episode goes on.
        refusal = self._refuse_oversized(action)
        calls: list[ParsedCall] = []
        new: list[dict[str, Any]] = []
        terminated = False
        if refusal is None:
            message, calls = parse_action(action, id_prefix=f"call_{self.steps}_", fmt=self.tool_format)
            self.messages.append(message)
            if calls:
                new = [self._run_call(call) for call in calls]
            elif STOP in (message.get("content") or ""):
                terminated = True
            else:
                turn = self.user.respond(message.get("content") or "", self._goal_reached)
                new, terminated = [{"role": "user", "content": turn.text}], turn.done
            self.messages.extend(new)
        limit = self.max_steps or self.task.max_steps or self.data.world.max_steps
        truncated = not terminated and self.steps >= limit
        reward = 0.0
        info = self._info(calls=len(calls))
        if self.tool_rewards:
            info["tool_calls"] = self.step_calls
        if terminated or truncated:
            self._done = True
            components = self._grade()
            reward = total_reward(components)
            if self.tool_rewards:
                records = [ToolCallRecord(*r) for r in self.tool_records]
                scored = score_tool_calls(records, self.messages, self.tool_reward_weights)
                info["tool_call_rewards"] = [r.as_info() for r in scored]
                info["tool_call_shaping"] = shaping_reward(scored)
                reward += self.tool_reward_weight * info["tool_call_shaping"]
            info["reward_components"] = components
            info["wall_s"] = time.perf_counter() - self._started
            info.update(self._security_report())
        if refusal is not None:
            info["action_error"] = "action_too_long"
        obs = refusal or (self._renderer.observation(new) if new else "(the conversation has ended)")
        return obs, reward, terminated, truncated, info

    # ---------------------------------------------------------------- oversized actions

    def _refuse_oversized(self, action: Any) -> str | None:
        """The error observation for an action longer than the action space allows, else None.

        Such a turn is neither executed nor said to the user (it is not recorded in the conversation): a reply of
        every candidate value must not reach the rubric, and nothing past the space's own limit is a legal action.
        """
        size = len(action) if isinstance(action, str) else len(json.dumps(action, default=str))
        limit = self.action_space.max_length if isinstance(self.action_space, spaces.Text) else MAX_TEXT
        if size <= limit:
            return None
        return (f"Your turn was refused and not carried out: it is {size} characters long, over the limit of "
                f"{limit} characters per turn. Nothing was said to the user and no tool was called.")

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._renderer.observation(self.messages)
        return None

    def close(self) -> None:
        self._close_state()
        super().close()

    # ---------------------------------------------------------------- mechanics

    def _system_prompt(self, world: WorldSpec) -> str:
        parts = [world.system_prompt]
        if world.policy:
            parts.append(f"# Policy\n{world.policy.strip()}")
        if self.guard is not None and self.guard.system_note():
            parts.append(self.guard.system_note())
        return "\n\n".join(parts)

    def _make_user(self, task: TaskSpec) -> UserSimulator:
        if callable(self.user_kind):
            return self.user_kind(task)
        if self.user_kind == "scripted":
            return ScriptedUser(task)
        if self.user_kind == "llm":
            if self.user_model is None:
                raise ValueError("user='llm' needs user_model=<ChatModel>")
            return LLMUser(task, self.user_model)
        raise ValueError(
            f"unknown user simulator {self.user_kind!r}; expected 'scripted', 'llm' or a factory"
        )

    def _run_call(self, call: ParsedCall) -> dict[str, Any]:
        assert self.state is not None
        before_hash = None
        if self.tool_rewards and call.name in self._write_tools:
            before_hash = self.state.hash()
            if self._distance is None:
                self._distance = state_distance(self.state, self._target_state())
        if call.error is not None:
            kind = "parse_error" if call.name == INVALID_CALL_NAME else "invalid_arguments"
            result = ToolResult(False, error=call.error, error_kind=kind)
        else:
            result = self._guarded_execute(call)
        self.tool_results.append(result)
        message = tool_message(call, result.payload())
        if self.tool_rewards:
            self._record_call(call, result, message["content"], before_hash)
        if self._session is not None:
            message["content"] = self._session.observe(call.name, result.ok, message["content"])
        return message

    def _record_call(self, call: ParsedCall, result: ToolResult, content: str, before_hash: str | None) -> None:
        """Keep what per-tool-call rewards need; the state is compared with the target only around writes."""
        assert self.state is not None
        before = self._distance
        changed = before_hash is not None and self.state.hash() != before_hash
        if changed:
            self._distance = state_distance(self.state, self._target_state())
            self._seen_calls.clear()
        key = (call.name, call.raw_arguments)
        # Plain tuples on the hot path; ToolCallRecords are built once, at the end of the episode.
        self.tool_records.append((
            self.steps, call.name, call.arguments if isinstance(call.arguments, dict) else {}, result.ok,
            result.error, content, changed, before if before_hash else None, self._distance if before_hash else None,
        ))
        self.step_calls.append({"name": call.name, "valid": result.ok, "error": result.error_kind,
                                "redundant": key in self._seen_calls})
        self._seen_calls.add(key)

    def _goal_reached(self) -> bool:
        return total_reward(self._grade()) == 1.0

    def _grade(self) -> dict[str, float]:
        assert self.task is not None and self.state is not None
        components = grade(self.task, self.state, self._target_hash(), self.messages,
                           world=self.data.world, results=self.tool_results)
        if "grade" in self._hooks:
            components.update(self._hooks["grade"](self.state, self.task, self.messages))
        return components

    def _info(self, calls: int = 0) -> dict[str, Any]:
        return {
            "env_name": self.data.name,
            "task_id": self.task.id if self.task else None,
            "messages": self.messages,
            "tools": self._tools,
            "step": getattr(self, "steps", 0),
            "tool_errors": [r.error_kind for r in self.tool_results[-calls:] if not r.ok] if calls else [],
        }

    # ---------------------------------------------------------------- security: guard and attacks

    def _setup_security(self, guard: bool | dict[str, Any] | GuardConfig | None, confirm: str | Confirm | None,
                        attack: str | None) -> None:
        world = self.data.world
        self.guard = Guard.build(world, guard)
        mode = confirm if confirm is not None else (self.guard.config.confirm if self.guard else "deny")
        if isinstance(mode, str) and mode not in ("deny", "user"):
            raise ValueError(f"confirm={mode!r}: expected 'deny', 'user' or a callable")
        self.confirm_mode = mode
        ref = world.meta.get("attacks")
        self.attacks: AttackSuite | None = resolve_python(self.data.directory, ref)() if ref else None
        if attack is not None:
            self._check_attack(attack)
        self.fixed_attack = attack
        self._session: GuardSession | None = None
        self.attack: str | None = None
        self._target: tuple[tuple[str, str | None], WorldState] | None = None  # the last one computed
        self._attack_hashes: dict[tuple[str, str], str] = {}

    def _check_attack(self, attack: str) -> None:
        if self.attacks is None:
            raise ValueError(f"environment {self.data.name!r} has no attack suite (meta.attacks in world.yaml)")
        if attack not in self.attacks.attack_ids():
            raise ValueError(f"unknown attack {attack!r} for {self.data.name!r}; e.g. {self.attacks.attack_ids()[:3]}")

    def _start_security(self, attack: str | None) -> None:
        assert self.state is not None and self.task is not None
        if attack is not None:
            self._check_attack(attack)
            assert self.attacks is not None
            self.attacks.plant(self.state, self.task, attack)
        self.attack = attack
        self._session = self.guard.session() if self.guard is not None and self.guard.active else None

    def _guarded_execute(self, call: ParsedCall) -> ToolResult:
        assert self.state is not None
        session = self._session
        if session is not None and session.needs_check(call.name):
            said = "\n".join(str(m.get("content") or "") for m in self.messages if m["role"] in ("system", "user"))
            reasons = session.check(call.name, call.arguments, self.state, said)
            if reasons:
                request = ConfirmationRequest(call.name, dict(call.arguments), tuple(reasons))
                approved = self._confirm(request)
                session.decisions.append({"tool": call.name, "approved": approved})
                if not approved:
                    mode = self.confirm_mode if isinstance(self.confirm_mode, str) else "callback"
                    return ToolResult(False, error=session.refusal(request, mode), error_kind="guard_denied")
        return self.data.executor.execute(self.state, call.name, call.arguments, self._rng, self.failure_rate)

    def _confirm(self, request: ConfirmationRequest) -> bool:
        if callable(self.confirm_mode):
            return bool(self.confirm_mode(request))
        if self.confirm_mode == "user":
            assert self.state is not None
            return serves_goal(self.data.executor, self.state, self._target_state(), request.tool, request.arguments)
        return False

    def _target_state(self) -> WorldState:
        """The state the reference solution reaches from this episode's start (with the attack planted)."""
        assert self.task is not None
        key = (self.task.id, self.attack)
        if self._target is None or self._target[0] != key:
            start = self.data.initial.copy()
            if self.attack is not None and self.attacks is not None:
                self.attacks.plant(start, self.task, self.attack)
            self._target = (key, replay_solution(self.data.executor, start, self.task))
        return self._target[1]

    def _target_hash(self) -> str:
        assert self.task is not None
        if self.attack is None:
            return self.data.target_hash(self.task)
        key = (self.task.id, self.attack)
        if key not in self._attack_hashes:
            self._attack_hashes[key] = self._target_state().hash()
        return self._attack_hashes[key]

    def _security_report(self) -> dict[str, Any]:
        """End-of-episode security info: the attack's outcome and the guard's held calls."""
        report: dict[str, Any] = {"guard": list(self._session.decisions) if self._session else []}
        if self.attack is not None and self.attacks is not None and self.state is not None:
            report["attack"] = {"id": self.attack, "goal_reached": self.attacks.goal_reached(self.state, self.attack)}
        return report

    def _close_state(self) -> None:
        if self.state is not None and "on_close" in self._hooks:
            self._hooks["on_close"](self.state)
        self.state = None
