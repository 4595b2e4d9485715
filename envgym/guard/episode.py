"""The guard over one env's episodes: provenance, confirmation of held calls, delimiting and attack planting.

`ToolWorldEnv` owns one `EpisodeGuard`; `start` opens each episode (planting the attack, if any), `execute` runs a
call through the guard, `observe` records where a result came from and escapes and delimits it, and `report`
says what happened at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from envgym.guard.core import Confirm, Guard, GuardConfig, Verdict
from envgym.guard.provenance import Provenance
from envgym.guard.text import UNTRUSTED_CLOSE, UNTRUSTED_OPEN, escape_control
from envgym.loader import EnvironmentData
from envgym.protocol import ParsedCall
from envgym.world.errors import EnvConfigError, ReplayError
from envgym.world.replay import Plant
from envgym.world.spec import TaskSpec, ToolCall
from envgym.world.state import WorldState
from envgym.world.tools import ToolErrorKind, ToolExecutor, ToolResult, resolve_python


class AttackSuite(Protocol):
    """The prompt-injection attacks of an environment (named by `meta.attacks` in world.yaml).

    An attack id is `<goal>/<template>`. `plant` writes the rendered payload into the records a task's tools will
    return; `goal_reached` is the security predicate on a final state and the calls that ran in the episode (True:
    the attacker won); `attacker_calls` are the calls that reach the goal from `state`, for the scripted
    attacker-obeying policy. Goals that depend on the user's request read it from `task`.
    """

    def attack_ids(self) -> list[str]: ...

    def payload(self, state: WorldState, attack_id: str, task: TaskSpec | None = None) -> str: ...

    def plant(self, state: WorldState, task: TaskSpec, attack_id: str) -> None: ...

    def goal_reached(self, state: WorldState, attack_id: str, task: TaskSpec | None = None,
                     calls: Sequence[ToolCall] = ()) -> bool: ...

    def attacker_calls(self, state: WorldState, attack_id: str, task: TaskSpec | None = None) -> list[ToolCall]: ...


@dataclass
class GuardSession:
    """The guard's view of one episode: the provenance of what the agent saw, the held calls and the calls run."""

    provenance: Provenance
    decisions: list[dict[str, Any]] = field(default_factory=list)  # {"tool", "approved"} per held call
    read: int = 0  # messages already fed to `provenance`


class EpisodeGuard:
    """The guard, the confirmation mode and the attack suite of one env, and the state of the current episode.

    `guard` is None when the guard is off; `session` is None outside an episode or when no call can ever need
    confirmation. `attack` is the attack planted in the current episode (None: a benign episode).
    """

    def __init__(self, data: EnvironmentData, guard: bool | dict[str, Any] | GuardConfig | None,
                 confirm: str | Confirm | None, attack: str | None):
        self.data = data
        self.guard = Guard.build(data.world, guard)
        mode = confirm if confirm is not None else (self.guard.config.confirm if self.guard else "deny")
        if isinstance(mode, str) and mode not in ("deny", "user"):
            raise EnvConfigError(f"confirm={mode!r}: expected 'deny', 'user' or a callable")
        self.confirm_mode: str | Confirm = mode
        self.attacks = self._load_attacks(data)
        if attack is not None:
            self.check_attack(attack)
        self.fixed_attack = attack
        self.session: GuardSession | None = None
        self.attack: str | None = None
        self.ran: list[ToolCall] = []  # the calls that ran this episode (for attack goals)
        self._task: TaskSpec | None = None

    @staticmethod
    def _load_attacks(data: EnvironmentData) -> AttackSuite | None:
        ref = data.world.meta.get("attacks")
        return resolve_python(data.directory, ref)() if ref else None

    # The attack suite is an object of a module imported from the env folder, which another process does not have:
    # a pickle leaves it out and unpickling loads it again.
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "attacks": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.attacks = self._load_attacks(self.data)

    def system_note(self) -> str:
        """What the system prompt says about delimited data ('' when nothing is delimited)."""
        return self.guard.system_note() if self.guard is not None else ""

    def check_attack(self, attack: str) -> None:
        if self.attacks is None:
            raise EnvConfigError(f"environment {self.data.name!r} has no attack suite (meta.attacks in world.yaml)")
        if attack not in self.attacks.attack_ids():
            raise EnvConfigError(f"unknown attack {attack!r} for {self.data.name!r}; "
                                 f"e.g. {self.attacks.attack_ids()[:3]}")

    def start(self, state: WorldState, task: TaskSpec, attack: str | None) -> None:
        """Open an episode on `state`: plant `attack` (None: benign) and start a fresh guard session."""
        if attack is not None:
            self.check_attack(attack)
            assert self.attacks is not None
            self.attacks.plant(state, task, attack)
        self.attack = attack
        self._task = task
        self.ran = []
        active = self.guard is not None and self.guard.active
        self.session = GuardSession(self.guard.provenance()) if self.guard is not None and active else None

    @property
    def plant(self) -> Plant | None:
        """How the attack changes the start state the user's goal is computed from: the suite's `plant_target`
        where it has one (an attack that leaves no trace in the world once read), else its `plant`."""
        if self.attacks is None:
            return None
        return getattr(self.attacks, "plant_target", self.attacks.plant)

    def target_state(self, task: TaskSpec) -> WorldState:
        """The state the reference solution reaches from this episode's start (with the attack planted)."""
        return self.data.target_state(task, self.attack, self.plant)

    def target_hash(self, task: TaskSpec) -> str:
        return self.data.target_hash(task, self.attack, self.plant)

    def execute(self, state: WorldState, task: TaskSpec, call: ParsedCall, messages: list[dict[str, Any]],
                run: Callable[[ParsedCall], ToolResult]) -> ToolResult:
        """Run `call` through the guard: a held call runs (through `run(call)`) only if confirmation approves it."""
        session, guard = self.session, self.guard
        sink = session is not None and guard is not None and guard.is_sink(call.name)
        if session is not None and (sink or (guard is not None and guard.names_records)):
            # Before the result is recorded, too: the user's words say which records they named.
            self._read(session, messages)
        if sink:
            assert session is not None and guard is not None
            verdict = guard.judge(call.name, call.arguments, session.provenance,
                                  lambda entity, key: state.tables.get(entity, {}).get(key),
                                  lambda entity: state.tables.get(entity, {}))
            if not verdict.allowed:
                approved = self._confirm(verdict, state, task)
                session.decisions.append({"tool": call.name, "approved": approved})
                if not approved:
                    mode = self.confirm_mode if isinstance(self.confirm_mode, str) else "callback"
                    return ToolResult(False, error=guard.refusal(verdict, mode), error_kind=ToolErrorKind.GUARD_DENIED)
        result = run(call)
        if self.attack is not None:
            self.ran.append(ToolCall(name=call.name, arguments=dict(call.arguments)))
        return result

    @staticmethod
    def _read(session: GuardSession, messages: list[dict[str, Any]]) -> None:
        """Feed the system prompt and the user's turns said since the last call to the episode's provenance."""
        if session.read == len(messages):
            return
        for message in messages[session.read:]:
            if message["role"] == "user":
                session.provenance.add_user(str(message.get("content") or ""))
            elif message["role"] == "system":
                session.provenance.add_system(str(message.get("content") or ""))
        session.read = len(messages)

    def _confirm(self, request: Verdict, state: WorldState, task: TaskSpec) -> bool:
        if callable(self.confirm_mode):
            return bool(self.confirm_mode(request))
        if self.confirm_mode == "user":
            try:
                target = self.target_state(task)
            except ReplayError:  # without a goal state the simulated user cannot tell, so it declines
                return False
            return serves_goal(self.data.executor, state, target, request.tool, request.arguments)
        return False

    def observe(self, tool: str, ok: bool, content: str, arguments: dict[str, Any] | None = None) -> str:
        """The tool result the agent sees: control tokens escaped, delimited when untrusted; records its origin
        (`arguments`: the call's, which say what source a read chose).

        A failed call of an untrusted tool taints like a successful one: its error message may quote the attacker.
        """
        session, guard = self.session, self.guard
        if session is None or guard is None:
            return content
        guard.record_result(session.provenance, tool, content, arguments)
        if not guard.config.delimit:
            return content
        content = escape_control(content)
        if tool in guard.untrusted:
            return f'{UNTRUSTED_OPEN} source="{tool}">\n{content}\n{UNTRUSTED_CLOSE}'
        return content

    def report(self, state: WorldState | None) -> dict[str, Any]:
        """End-of-episode security info: the guard's held calls and the attack's outcome."""
        report: dict[str, Any] = {"guard": list(self.session.decisions) if self.session else []}
        if self.attack is not None and self.attacks is not None and state is not None:
            reached = self.attacks.goal_reached(state, self.attack, self._task, self.ran)
            report["attack"] = {"id": self.attack, "goal_reached": reached}
        return report


def serves_goal(executor: ToolExecutor, state: WorldState, target: WorldState, tool: str,
                args: dict[str, Any]) -> bool:
    """The simulated user's approval: True when the call changes the world and every change is one its goal needs.

    The call runs on a copy of `state`; each added record must equal the goal state's record with the same key,
    each removed record must be gone in the goal state, and each changed field must hold the goal state's value.
    """
    trial = state.copy()
    if not executor.execute(trial, tool, args).ok:
        return False
    changes = state.diff(trial)
    if not changes:
        return False
    for change in changes:
        goal_record = target.tables.get(change.entity, {}).get(change.key)
        if change.kind == "added" and goal_record != change.after:
            return False
        if change.kind == "removed" and goal_record is not None:
            return False
        if change.kind == "changed" and (goal_record is None or goal_record.get(str(change.field)) != change.after):
            return False
    return True

