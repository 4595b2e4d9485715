"""Replaying a task's reference solution, checking env assertions, and the one cache of target states."""

from __future__ import annotations

from collections.abc import Callable

from envgym.world.errors import EnvConfigError, ReplayError
from envgym.world.spec import Assertion, TaskSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolExecutor, compare

# Writes an attack's payload into a start state: (state, task, attack id). `AttackSuite.plant` has this shape.
Plant = Callable[[WorldState, TaskSpec, str], None]


def replay_solution(executor: ToolExecutor, initial: WorldState, task: TaskSpec) -> WorldState:
    """Run the task's reference solution on a copy of `initial`; raise ReplayError if a step fails (the task is
    broken, or a resource its tools need failed)."""
    state = initial.copy()
    for i, call in enumerate(task.solution):
        result = executor.execute(state, call.name, call.arguments)
        if not result.ok:
            raise ReplayError(f"task {task.id}: reference solution step {i} ({call.name}) failed: {result.error}")
    return state


def check_assertion(state: WorldState, assertion: Assertion) -> bool:
    """Whether one env assertion holds on `state`."""
    table = state.tables.get(assertion.entity, {})
    if assertion.key is not None:
        record = dict.get(table, assertion.key)  # read only: no copy-on-write copy (see world.state.Table)
    else:
        record = next(
            (r for r in dict.values(table) if all(r.get(k) == v for k, v in assertion.match.items())), None
        )
    if assertion.field is None:
        return compare(record, assertion.op if assertion.op in ("exists", "not_exists") else "exists", None)
    if record is None:
        return False
    return compare(record.get(assertion.field), assertion.op, assertion.value)


class TargetCache:
    """The state each task's reference solution reaches, per (task, attack): an attack planted in the start
    state changes the records the solution runs over, so it changes the target too.

    Hashes are kept for every key (grading needs one per episode). Only the last target state is kept: states
    can be large, and an env asks for the same one many times in a row (per-call rewards, the confirming user).
    """

    def __init__(self, executor: ToolExecutor, initial: WorldState):
        self.executor = executor
        self.initial = initial
        self._hashes: dict[tuple[str, str | None], str] = {}
        self._last: tuple[TaskSpec, str | None, WorldState] | None = None

    def state(self, task: TaskSpec, attack: str | None = None, plant: Plant | None = None) -> WorldState:
        """The target state (shared: do not change it). `plant` is required with an attack."""
        # By identity, not id: the synthesizer derives tasks that keep their parent's id while it works on them.
        if self._last is None or self._last[0] is not task or self._last[1] != attack:
            start = self.initial
            if attack is not None:
                if plant is None:
                    raise EnvConfigError(f"target of task {task.id} under attack {attack!r} needs the attack's plant")
                start = self.initial.copy()
                plant(start, task, attack)
            self._last = (task, attack, replay_solution(self.executor, start, task))
        return self._last[2]

    def hash(self, task: TaskSpec, attack: str | None = None, plant: Plant | None = None) -> str:
        """The canonical hash of the target state, computed once per (task, attack)."""
        key = (task.id, attack)
        if key not in self._hashes:
            self._hashes[key] = self.state(task, attack, plant).hash()
        return self._hashes[key]
