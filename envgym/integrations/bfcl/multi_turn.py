"""`envgym/bfcl-multi-turn-v0`: a BFCL multi-turn entry as an episode, BFCL's backends as the tools and BFCL's
multi-turn checker as the reward.

The contract (that of `envgym.env.ToolWorldEnv`, with BFCL's turn structure)
--------------------------------------------------------------------------
``reset(seed, options)`` picks the entry (``options["task_id"]``, ``task=``, else a draw over ``category=``), builds
its backends (``GorillaFileSystem``, ``TwitterAPI``, ...) from the entry's initial config with BFCL's executor, and
returns the system prompt, the tools and the first user turn. ``info["tools"]`` are the function docs BFCL gives
an FC model (a miss_func entry's held-out functions left out).

``step(action)``: tool calls in the action are run in order on the backends, by BFCL's executor, and their results
(the strings BFCL's inference loop shows a model) are the observation. An action without calls ends the user turn,
as an undecodable response does in BFCL's loop; so does an action with a call that does not parse (none of its
calls run: BFCL decodes a response whole). The next user turn is then the observation. On a miss_func entry's
held-out turn the missing functions join ``info["tools"]`` and the user says BFCL's "I have updated some more
functions you can choose from. What about now?". A turn with more than BFCL's ``MAXIMUM_STEP_LIMIT`` (20) steps of
calls is forced to quit, and the episode ends as BFCL's does. ``###STOP###`` ends the episode; the turns left get
no calls.

The episode ends (``terminated``) after the last turn; ``truncated`` after ``max_steps`` actions, if set. The
reward is then BFCL's multi-turn checker verdict on the calls of every turn (1.0 valid, else 0.0), run as BFCL's
eval runner runs it (the backends replayed from the initial config, state and responses compared with the ground
truth after each turn); ``info["bfcl"]`` holds its ``valid``, ``error_type`` and ``error_message``. The ground
truth never reaches observations or ``info``.

Departures from BFCL, none of which changes a verdict BFCL reaches on a well-formed response: a call of a name that
is no backend method, with an argument name that is not an identifier, or with arguments that are not an object
is answered with the error text BFCL's executor gives, without evaluating it (BFCL evaluates it in its module's
namespace). The env pickles at any point: the backends are its own objects, put into BFCL's executor only while it
runs a step.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, SupportsFloat

from envgym.integrations.bfcl import data
from envgym.integrations.bfcl.base import BfclEnvBase
from envgym.integrations.bfcl.calls import call_string
from envgym.integrations.bfcl.checkers import Verdict, fresh_model_name, multi_turn_verdict
from envgym.protocol import parse_action, tool_message

STOP = "###STOP###"


def _executor() -> Any:
    data.bfcl()
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return multi_turn_utils


class Backends:
    """One episode's BFCL backend instances, run by BFCL's own executor (`execute_multi_turn_func_call`).

    The executor finds an entry's instances in its module's globals under a name made of the model name, the entry
    id and the class; they are put there for the length of one call and taken back, so the episode owns them.
    """

    def __init__(self, entry: dict[str, Any]):
        self.entry_id: str = entry["id"]
        self.initial_config: dict[str, Any] = entry.get("initial_config", {})
        self.classes: list[str] = list(entry["involved_classes"])
        self.long_context = "long_context" in data.category_of(self.entry_id)
        self.model_name = fresh_model_name("live")
        self.instances: dict[str, Any] = {}
        self.run([])
        self.methods = frozenset(name for inst in self.instances.values()
                                 for name, _ in inspect.getmembers(inst, inspect.ismethod) if not name.startswith("_"))

    def _global_name(self, class_name: str) -> str:
        # bfcl_eval...multi_turn_utils.execute_multi_turn_func_call names its instances so.
        return re.sub(r"[-./:]", "_", f"{self.model_name}_{self.entry_id}_{class_name}_instance")

    def run(self, calls: list[str]) -> list[str]:
        """Run call strings in order; their results as BFCL's executor writes them."""
        executor = _executor()
        names = {c: self._global_name(c) for c in self.classes}
        space = executor.__dict__
        for class_name, instance in self.instances.items():
            space[names[class_name]] = instance
        try:
            results, instances = executor.execute_multi_turn_func_call(
                calls, self.initial_config, self.classes, self.model_name, self.entry_id,
                long_context=self.long_context, is_evaL_run=False)
        finally:
            kept = {n: space.pop(n, None) for n in names.values()}
        if any(kept[names[c]] is not instances[c] for c in self.classes):
            raise RuntimeError("bfcl_eval's executor no longer keeps instances under the names envgym expects")
        self.instances = dict(instances)
        return [str(r) for r in results]

    def signature(self, name: str) -> inspect.Signature | None:
        """The signature of backend method `name` (for naming a ground-truth call's positional arguments)."""
        for instance in self.instances.values():
            method = getattr(instance, name, None)
            if name in self.methods and callable(method):
                return inspect.signature(method)
        return None


class BfclMultiTurnEnv(BfclEnvBase):
    """A BFCL multi-turn entry as an episode (see the module docstring for the contract)."""

    env_name = "bfcl-multi-turn"

    def __init__(self, category: str | list[str] | None = None, task: str | None = None, *,
                 max_steps: int | None = None, seed: int | None = None, tool_format: str | None = None,
                 render_mode: str | None = None):
        super().__init__(data.MULTI_TURN_CATEGORIES, category, task, max_steps, seed, tool_format, render_mode)
        task_text, behaviour, self._more_functions, self.step_limit = data.prompts()
        self._system = f"{task_text}\n\n{behaviour}"
        self.entry: dict[str, Any] = {}
        self._ground_truth: list[list[str]] = []
        self.backends: Backends | None = None
        self.tools: list[dict[str, Any]] = []
        self.turn = 0
        self.turn_steps = 0
        self.decoded: list[list[list[str]]] = []  # per turn, per step: the call strings BFCL's checker reads
        self._forced = False  # the current turn went past BFCL's step limit

    # ---------------------------------------------------------------- the Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task_id = self._choose_task(seed, options)
        self.entry = data.entry(task_id)
        self._ground_truth = data.ground_truth(task_id)
        self.backends = Backends(self.entry)
        self.tools = data.tool_schemas(self.entry["function"])
        self.turn, self.turn_steps, self.steps = 0, 0, 0
        self.decoded = [[]]
        self._done = self._forced = False
        self.messages = [{"role": "system", "content": self._system}, *self._turn_messages(0)]
        first = self._renderer.observation(self.messages[1:])
        obs = f"system: {self._system}\n\n{self._renderer.tools_prompt(self.tools)}\n\n{first}"
        return obs, self._info([])

    def step(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._done or self.backends is None:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, self._info([])
        self.steps += 1
        refusal = self._refusal(action)
        if refusal is not None:
            info = self._info([])
            info["action_error"] = "action_too_long"
            truncated = self._out_of_steps()
            return refusal, self._finish(info) if truncated else 0.0, False, truncated, info
        message, calls = parse_action(action, id_prefix=f"call_{self.steps}_", fmt=self.tool_format)
        self.messages.append(message)
        new: list[dict[str, Any]] = []
        errors: list[str] = []
        terminated = False
        if calls and all(c.error is None for c in calls):
            strings = [call_string(c.name, c.arguments, self.backends.methods) for c in calls]
            results = self.backends.run(strings)
            new = [tool_message(c, r) for c, r in zip(calls, results, strict=True)]
            errors = ["execution_error" for r in results if r.startswith("Error during execution")]
            self.decoded[-1].append(strings)
            self.turn_steps += 1
            # BFCL forces the model to quit: this turn is kept and the turns after it are missing, so the
            # checker sees fewer turns than the ground truth (unless this was the last one).
            if self.turn_steps > self.step_limit:
                terminated = self._forced = True
        else:
            new = [tool_message(c, f"Not run: {c.error}. An undecodable response ends the turn.")
                   for c in calls if c.error is not None]
            errors = ["parse_error"] * len(new)
            if STOP in (message.get("content") or "") and not calls:
                terminated = True
            else:
                turn_messages = self._next_turn()
                new += turn_messages
                terminated = not turn_messages
        self.messages.extend(new)
        info = self._info(errors)
        truncated = not terminated and self._out_of_steps()
        reward = 0.0
        if terminated or truncated:
            reward = self._finish(info)
        obs = self._renderer.observation(new) if new else "(the conversation has ended)"
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.backends = None
        super().close()

    # ---------------------------------------------------------------- mechanics

    def _turn_messages(self, turn: int) -> list[dict[str, Any]]:
        """The user's messages opening `turn`; a held-out turn adds its functions to the tools first."""
        held = (self.entry.get("missed_function") or {}).get(str(turn))
        if held:
            self.entry["function"].extend(held)
            self.tools = data.tool_schemas(self.entry["function"])
            return [{"role": "user", "content": self._more_functions}]
        return [{"role": m["role"], "content": m["content"]} for m in self.entry["question"][turn]]

    def _next_turn(self) -> list[dict[str, Any]]:
        """Close the current turn and open the next: its messages, or [] after the last."""
        if self.turn + 1 >= len(self.entry["question"]):
            return []
        self.turn += 1
        self.turn_steps = 0
        self.decoded.append([])
        return self._turn_messages(self.turn)

    def _out_of_steps(self) -> bool:
        return self.max_steps is not None and self.steps >= self.max_steps

    def _finish(self, info: dict[str, Any]) -> float:
        """End the episode: BFCL's verdict on every turn's calls (turns never reached had none)."""
        self._done = True
        decoded = self.decoded
        if not self._forced:
            decoded = decoded + [[] for _ in range(len(self.entry["question"]) - len(decoded))]
        verdict: Verdict = multi_turn_verdict(decoded, self._ground_truth, self.entry)
        info["bfcl"] = self.last_verdict = verdict.as_info()
        info["reward_components"] = {"bfcl": float(verdict.valid)}
        info["category"] = data.category_of(self.entry["id"])
        return float(verdict.valid)

    def _info(self, tool_errors: list[str]) -> dict[str, Any]:
        return {
            "env_name": self.env_name,
            "task_id": self.entry.get("id"),
            "messages": self.messages,
            "tools": self.tools,
            "step": self.steps,
            "turn": self.turn,
            "tool_errors": tool_errors,
        }
