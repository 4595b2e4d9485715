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
    names the problem and the episode goes on; so does a tool that crashes (the observation names the tool and the
    exception, `info["tool_errors"]` says `tool_crashed`). An action longer than ``action_space.max_length`` is
    refused with an error observation (``info["action_error"] == "action_too_long"``), neither executed nor added to
    the conversation. Every text format of ``envgym.protocol`` is read (Hermes, Qwen3-Coder XML, pythonic, Mistral);
    ``tool_format="<name>"`` pins one, for parsing and for the text the env writes back.

    ``terminated`` is True when the user ends the conversation (goal met or patience lost) or the agent ends it by
    writing ``###STOP###``. ``truncated`` is True when ``max_steps`` turns have been taken. The reward is 0 until the
    episode ends; then it is the rubric's verdict (``info["reward_components"]``): 1.0 only if the final state equals
    the state the task's reference solution reaches, every env assertion holds, the task's answers were said without
    guessing, every required output was said and the trajectory kept the world's policy rules
    (``envgym.rewards.rubric``).
    ``info["state_hash"]`` at the end is the canonical hash of the agent's final world state (runs compare by it:
    in-process and sandboxed, one seed and one action sequence give the same hash).
    A task that asks for answers also gets ``info["answer_reported"]`` at the end: whether the final reply stated a
    value of each answer type that a tool returned, right or wrong (``envgym.rewards.answers.reported_result``;
    training can pay shaping credit only to episodes that answer).
    If grading itself fails (the reference solution no longer replays, a grading hook raises), the reward is 0 and
    ``info["grading_error"]`` says why; the agent never sees it.

Per-tool-call rewards (``envgym.rewards.toolcalls``, on unless ``tool_rewards=False``)
    Each step's ``info["tool_calls"]`` labels its calls (valid, error kind, redundant repeat). At the end
    ``info["tool_call_rewards"]`` labels every call (valid, needed: its result was used or it moved the state toward
    the target, redundant, error, credited, broke_rule) with a shaping value, summed in
    ``info["tool_call_shaping"]``; the episode reward adds ``tool_reward_weight`` times that sum, bounded so that a
    failed episode stays below 1 (``envgym.rewards.credit``; weight 0 by default: the reward is the rubric's).

Security (``envgym.guard``)
    The guard is on by default (``guard=False`` turns it off, a dict overrides the world's ``guard:`` settings). A
    call of any tool not declared read-only is judged by where its values came from and what the user asked for
    (see ``envgym.guard.core``); a held call goes to ``confirm`` (``"deny"``, ``"user"`` or a callable), and an
    unconfirmed call is not run and its tool result says why. Tool results have chat-template control tokens
    escaped, and results of untrusted tools are wrapped in ``<untrusted_data>`` delimiters. ``attack="<goal>/<template>"`` (or ``options["attack"]``) plants a
    prompt-injection payload from the world's attack suite into the records the task reads; the payload reaches the
    agent only through tool results. At episode end ``info["attack"]`` says whether the attacker's goal was reached
    and ``info["guard"]`` lists the held calls.

The rubric, the reference solution and the attack's goal never appear in observations, tools or ``info``.

``await env.areset(...)`` and ``await env.astep(action)`` are the same calls for an asyncio loop (``RemoteEnv`` has
them too, over asyncio HTTP); ``envgym.play.aio`` steps many envs at once.

An env pickles and deep-copies at any point (for spawned workers, Ray and the like). Per-episode resources held
outside the data (``WorldState.resources``: code-v0's sandbox) are not copied; the copy acquires its own.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym

from envgym.guard import Confirm, EpisodeGuard, GuardConfig
from envgym.loader import EnvironmentData, build_environment, load_environment
from envgym.protocol import (
    INVALID_CALL_NAME,
    ParsedCall,
    parse_action,
    renderer,
    tool_message,
)
from envgym.rewards.answers import reported_result
from envgym.rewards.credit import bounded_reward
from envgym.rewards.rubric import grade, passes, total_reward
from envgym.rewards.rules import rule_breaking_calls
from envgym.rewards.toolcalls import ToolCallLog, ToolCallWeights, score_tool_calls, shaping_reward
from envgym.spaces import MAX_TEXT, TextSpace
from envgym.users import STOP, LLMUser, ScriptedUser, UserSimulator
from envgym.world.errors import EnvConfigError
from envgym.world.spec import TaskSpec, WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import FaultLedger, ResultLog, ToolErrorKind, ToolResult, resolve_python

_log = logging.getLogger(__name__)


def _no_episode() -> WorldState:
    raise RuntimeError("no episode has begun: call reset() first")


class ToolWorldEnv(gym.Env[str, Any]):
    """A tool-use episode over a stateful world (see the module docstring for the contract)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012 (gymnasium declares it an instance attribute)
    # `info["messages"]` is one list per episode that steps only append to: an env server may send a client only
    # the new messages (see envgym.sandbox.wire, info deltas).
    info_messages_append_only = True

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
                raise EnvConfigError("ToolWorldEnv needs env_dir, data, or world (+ tasks)")
        if not data.tasks:
            raise EnvConfigError(f"environment {data.name!r} has no tasks")
        if task is not None:
            data.task(task)  # fail early on an unknown task id
        if not (callable(user) or user in ("scripted", "llm")):
            raise EnvConfigError(f"unknown user simulator {user!r}; expected 'scripted', 'llm' or a factory")
        if user == "llm" and user_model is None:
            raise EnvConfigError("user='llm' needs user_model=<ChatModel>")
        self.data = data
        self.fixed_task = task
        self.max_steps = max_steps
        self.failure_rate = data.world.failure_rate if failure_rate is None else failure_rate
        self.user_kind = user
        self.user_model = user_model
        self.render_mode = render_mode
        self.action_space = TextSpace()
        self.observation_space = TextSpace()
        self.tool_rewards = tool_rewards
        self.tool_reward_weight = tool_reward_weight
        self.tool_reward_weights = ToolCallWeights()
        self.security = EpisodeGuard(data, guard, confirm, attack)
        self._default_seed = seed
        self._tools = data.executor.openai_tools()
        # Tool-call format: None reads every format and writes Hermes; a name pins both (envgym.protocol.FORMATS).
        self.tool_format = None if tool_format in (None, "auto") else tool_format
        self._renderer = renderer(self.tool_format)
        self._tools_prompt = self._renderer.tools_prompt(self._tools)  # the same text every reset
        self._hooks = self._resolve_hooks(data)
        self._write_tools = frozenset(t.name for t in data.world.tools if not t.read_only)
        policy, note = data.world.policy, self.security.system_note()
        self._system = "\n\n".join([data.world.system_prompt, *([f"# Policy\n{policy.strip()}"] if policy else []),
                                     *([note] if note else [])])
        # The episode, replaced by reset().
        self.state: WorldState | None = None
        self.task: TaskSpec | None = None
        self.user: UserSimulator | None = None
        self.messages: list[dict[str, Any]] = []
        self.tool_results = ResultLog()
        self.calls = ToolCallLog(self._write_tools, _no_episode)
        self.steps = 0
        # The episode's tool RNG is seeded from np_random at reset but built on first use: seeding a Mersenne
        # Twister costs as much as the rest of retail's world copy, and most episodes never draw from it.
        self._rng_seed = 0
        self._rng: random.Random | None = None
        self._faults = FaultLedger()
        self._started = 0.0
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
        self._rng_seed, self._rng = int(self.np_random.integers(2**63)), None
        self._faults = FaultLedger()
        self.state = self.data.initial.copy()
        if "on_reset" in self._hooks:
            self._hooks["on_reset"](self.state, self.task, self._episode_rng())
        self.security.start(self.state, self.task, options.get("attack", self.security.fixed_attack))
        self.user = self._make_user(self.task)
        self.steps = 0
        self.tool_results = ResultLog()
        # Not a bound method of self: the log would hold the env in a reference cycle, and a closed env would wait
        # for the cyclic collector instead of being freed at once (an env server closes thousands).
        self.calls = ToolCallLog(self._write_tools, partial(self.security.target_state, self.task))
        self._done = False
        self._started = time.perf_counter()
        self.messages = [
            {"role": "system", "content": self._system},
            {"role": "user", "content": self.user.opening()},
        ]
        obs = f"system: {self._system}\n\n{self._tools_prompt}\n\nuser: {self.messages[1]['content']}"
        return obs, self._info([])

    def step(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._done or self.task is None or self.state is None or self.user is None:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, self._info([])
        self.steps += 1
        # An oversized action is refused before parsing: not executed, not said, the episode goes on.
        refusal = self._refuse_oversized(action)
        new: list[dict[str, Any]] = []
        labels: list[dict[str, Any]] = []
        errors: list[ToolErrorKind | None] = []  # of this step's failed calls, in order
        terminated = False
        if refusal is None:
            message, calls = parse_action(action, id_prefix=f"call_{self.steps}_", fmt=self.tool_format)
            self.messages.append(message)
            if calls:
                for call in calls:  # a loop, not a comprehension: one call is the common case
                    new.append(self._run_call(call, labels, errors))
            elif STOP in (message.get("content") or ""):
                terminated = True
            else:
                turn = self.user.respond(message.get("content") or "", self._goal_reached)
                new, terminated = [{"role": "user", "content": turn.text}], turn.done
            self.messages.extend(new)
        limit = self.max_steps or self.task.max_steps or self.data.world.max_steps
        truncated = not terminated and self.steps >= limit
        reward = 0.0
        info = self._info(errors)
        if self.tool_rewards:
            info["tool_calls"] = labels
        if terminated or truncated:
            self._done = True
            components, error = self._grade()
            reward = total_reward(components)
            if self.tool_rewards:
                broke = rule_breaking_calls(self.data.world, self.task, self.messages, self.tool_results, self.state)
                scored = score_tool_calls(self.calls.records, self.messages, self.tool_reward_weights,
                                          reference=[c.name for c in self.task.solution], excluded=broke)
                info["tool_call_rewards"] = [r.as_info() for r in scored]
                info["tool_call_shaping"] = shaping_reward(scored)
                reward = bounded_reward(reward, self.tool_reward_weight * info["tool_call_shaping"])
            info["reward_components"] = components
            if self.task.answers:
                info["answer_reported"] = reported_result(self.task.answers, self.messages)
            info["state_hash"] = self.state.hash()
            if error is not None:
                info["grading_error"] = error
            info["wall_s"] = time.perf_counter() - self._started
            info.update(self.security.report(self.state))
        if refusal is not None:
            info["action_error"] = "action_too_long"
        obs = refusal or (self._renderer.observation(new) if new else "(the conversation has ended)")
        return obs, reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._renderer.observation(self.messages)
        return None

    def close(self) -> None:
        self._close_state()
        super().close()

    # ---------------------------------------------------------------- the same, from an event loop

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """`reset` without blocking the event loop: it runs on a worker thread."""
        import asyncio  # here, not with the module: most envs are never stepped from an event loop

        return await asyncio.to_thread(self.reset, seed=seed, options=options)

    async def astep(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """`step` without blocking the event loop: it runs on a worker thread, since tools, a sandbox's exec and
        an LLM user are synchronous code. Calls on one env must not overlap (await each before the next)."""
        import asyncio

        return await asyncio.to_thread(self.step, action)

    # ---------------------------------------------------------------- mechanics

    def _refuse_oversized(self, action: Any) -> str | None:
        """The error observation for an action longer than the action space allows, else None.

        Such a turn is neither executed nor said to the user (it is not recorded in the conversation): a reply of
        every candidate value must not reach the rubric, and nothing past the space's own limit is a legal action.
        """
        size = len(action) if isinstance(action, str) else len(json.dumps(action, default=str))
        limit = self.action_space.max_length if isinstance(self.action_space, gym.spaces.Text) else MAX_TEXT
        if size <= limit:
            return None
        return (f"Your turn was refused and not carried out: it is {size} characters long, over the limit of "
                f"{limit} characters per turn. Nothing was said to the user and no tool was called.")

    @staticmethod
    def _resolve_hooks(data: EnvironmentData) -> dict[str, Callable[..., Any]]:
        refs = data.world.hooks.model_dump().items()
        return {name: resolve_python(data.directory, ref) for name, ref in refs if ref is not None}

    # Hooks are functions of modules imported from the env folder, which another process does not have: a pickle
    # leaves them out and unpickling resolves them again.
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_hooks": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._hooks = self._resolve_hooks(self.data)

    def _make_user(self, task: TaskSpec) -> UserSimulator:
        if callable(self.user_kind):
            return self.user_kind(task)
        if self.user_kind == "llm":
            return LLMUser(task, self.user_model, write_tools=self._write_tools)
        return ScriptedUser(task, write_tools=self._write_tools)

    def _run_call(self, call: ParsedCall, labels: list[dict[str, Any]],
                  errors: list[ToolErrorKind | None]) -> dict[str, Any]:
        """Run one call; its tool message is returned, its label (with tool rewards on) appended to `labels` and
        its error kind, if it failed, to `errors`."""
        assert self.state is not None and self.task is not None
        before_hash = self.calls.before(call, self.state) if self.tool_rewards else None
        if call.error is not None:
            kind = ToolErrorKind.PARSE_ERROR if call.name == INVALID_CALL_NAME else ToolErrorKind.INVALID_ARGUMENTS
            result = ToolResult(False, error=call.error, error_kind=kind)
        else:
            result = self.security.execute(self.state, self.task, call, self.messages, self._execute)
        self.tool_results.append(result)
        if not result.ok:
            errors.append(result.error_kind)
        message = tool_message(call, result.payload())
        if self.tool_rewards:
            labels.append(self.calls.record(self.steps, call, result, message["content"], self.state, before_hash))
        message["content"] = self.security.observe(call.name, result.ok, message["content"], call.arguments)
        return message

    def _execute(self, call: ParsedCall) -> ToolResult:
        assert self.state is not None
        return self.data.executor.execute(self.state, call.name, call.arguments, self._episode_rng(), self.failure_rate,
                                          self._faults)

    def _episode_rng(self) -> random.Random:
        """The episode's tool RNG (faults, hooks), seeded by reset's draw from `np_random`."""
        if self._rng is None:
            self._rng = random.Random(self._rng_seed)
        return self._rng

    def _goal_reached(self) -> bool:
        """Whether the episode's reward would be 1.0 now (the scripted user's cue to stop)."""
        assert self.task is not None and self.state is not None
        if "grade" in self._hooks:
            components, _ = self._grade()
            return total_reward(components) == 1.0
        try:
            return passes(self.task, self.state, self.security.target_hash(self.task), self.messages,
                          world=self.data.world, results=self.tool_results)
        except Exception:  # as in _grade: a failing grader is never the agent's doing, and the reward would be 0
            return False

    def _grade(self) -> tuple[dict[str, float], str | None]:
        """The rubric's components, or ({}, why) when grading itself fails: that is never the agent's doing, and
        an exception here would make the agent's action illegal."""
        assert self.task is not None and self.state is not None
        try:
            components = grade(self.task, self.state, self.security.target_hash(self.task), self.messages,
                               world=self.data.world, results=self.tool_results)
            if "grade" in self._hooks:
                components.update(self._hooks["grade"](self.state, self.task, self.messages))
        except Exception as exc:
            _log.warning("%s: grading task %s failed: %s", self.data.name, self.task.id, exc)
            return {}, f"grading failed: {type(exc).__name__}: {exc}"
        return components, None

    def _info(self, tool_errors: list[ToolErrorKind | None]) -> dict[str, Any]:
        return {
            "env_name": self.data.world.name,
            "task_id": self.task.id if self.task is not None else None,
            "messages": self.messages,
            "tools": self._tools,
            "step": self.steps,
            "tool_errors": tool_errors,
        }

    def _close_state(self) -> None:
        if self.state is not None and "on_close" in self._hooks:
            self._hooks["on_close"](self.state)
        self.state = None
