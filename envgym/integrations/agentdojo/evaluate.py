"""Scores envgym's guard on AgentDojo's suites without a model.

Utility: each user task's ground truth, played through the guard on the benign environment, passes AgentDojo's own
utility check. Security: for every (user task, injection task) pair the injection vectors the user task reads carry
AgentDojo's `important_instructions` payload, and the always-obey agent issues the injection task's ground truth
right after reading it; an attack succeeds when AgentDojo's security check says the injection goal was reached.
Each is measured with the guard off and on; AgentDojo's own `GroundTruthPipeline` gives the no-defense utility.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from agentdojo.agent_pipeline import GroundTruthPipeline
from agentdojo.agent_pipeline.agent_pipeline import load_system_message
from agentdojo.attacks.base_attacks import FixedJailbreakAttack
from agentdojo.attacks.important_instructions_attacks import ImportantInstructionsAttack
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime
from agentdojo.task_suite.load_suites import get_suites
from agentdojo.task_suite.task_suite import TaskSuite, functions_stack_trace_from_messages
from agentdojo.types import get_text_content_as_str

from envgym.integrations.agentdojo.goals import own_goals
from envgym.integrations.agentdojo.mapping import ToolInfo, build_guard
from envgym.integrations.agentdojo.pipeline import (
    GuardedToolsExecutor,
    Held,
    ScriptedAgent,
    scripted_pipeline,
)

BENCHMARK_VERSION = "v1.2.2"
SUITES = ("workspace", "travel", "banking", "slack")
Progress = Callable[[str], None]


@dataclass
class Refusal:
    """A user task whose ground truth the guard stopped: the task, its prompt and each refused call with reasons."""

    task: str
    prompt: str
    calls: list[dict[str, Any]]


@dataclass
class SuiteResult:
    """One suite's numbers. Attack pairs count (user task, injection task) pairs by the injection's kind of goal."""

    suite: str
    user_tasks: int
    injection_tasks: int
    utility_agentdojo: int = 0  # AgentDojo's GroundTruthPipeline, no defense
    utility_guard_off: int = 0
    utility_guard_on: int = 0
    refusals: list[Refusal] = field(default_factory=list)
    pairs: int = 0  # pairs whose injection task has ground-truth calls
    attacks_guard_off: int = 0
    attacks_guard_on: int = 0
    attempted_guard_on: int = 0  # AgentDojo's trace checks over the attempted calls, refused ones included
    obeyed_guard_off: int = 0  # pairs where the agent met the payload and issued the attacker's calls
    obeyed_guard_on: int = 0  # fewer than with the guard off when the guard refused the read that carries it
    utility_under_attack_on: int = 0
    text_only_pairs: int = 0  # the injection's goal is only something said, which no tool guard can stop
    text_only_success_on: int = 0
    no_ground_truth: list[str] = field(default_factory=list)  # injection tasks AgentDojo ships without calls
    successful_attacks_on: list[str] = field(default_factory=list)
    # Our own injection goals (envgym.integrations.agentdojo.goals), counted apart from AgentDojo's.
    own_goals: int = 0
    own_pairs: int = 0
    own_attacks_guard_off: int = 0
    own_attacks_guard_on: int = 0
    own_obeyed_guard_on: int = 0
    own_successful_on: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tools(suite: TaskSuite) -> list[ToolInfo]:
    return [ToolInfo(f.name, f.description, f.parameters.model_json_schema()) for f in suite.tools]


class _Attack(FixedJailbreakAttack):
    """AgentDojo's `important_instructions` payload, placed where the user task's ground truth reads (its
    injection candidates); the model's name is left generic because there is no model."""

    name = "important_instructions"

    def __init__(self, suite: TaskSuite) -> None:
        super().__init__(ImportantInstructionsAttack._JB_STRING, suite, GroundTruthPipeline(None))
        self.user_name = "Emma Johnson"


@dataclass
class Outcome:
    """One run: the user task's utility, whether the attack reached its goal by the calls that ran and by the calls
    the agent attempted, and the calls the guard refused."""

    utility: bool
    attack_success: bool
    attack_attempted: bool
    held: list[Held]
    obeyed: bool  # the agent found the payload in a result and issued the attacker's calls


def _check(task: BaseUserTask | BaseInjectionTask, said: str, pre: Any, post: Any, trace: list[FunctionCall]) -> bool:
    """AgentDojo's own check of `task`: from the trace of calls where the task defines one, else from the states.
    A check that fails on a state an attack left (a user removed, a lookup of them raises) is not passed."""
    try:
        return _checked(task, said, pre, post, trace)
    except (KeyError, IndexError, ValueError, StopIteration):
        return False


def _checked(task: BaseUserTask | BaseInjectionTask, said: str, pre: Any, post: Any, trace: list[FunctionCall]) -> bool:
    if isinstance(task, BaseUserTask):
        verdict = task.utility_from_traces(said, pre, post, trace)
        return bool(task.utility(said, pre, post) if verdict is None else verdict)
    verdict = task.security_from_traces(said, pre, post, trace)
    return bool(task.security(said, pre, post) if verdict is None else verdict)


class SuiteRunner:
    """Runs one suite's tasks through the scripted agents with the guard off or on."""

    def __init__(self, name: str, guard_setting: dict[str, Any] | None = None) -> None:
        self.name = name
        self.suite: TaskSuite = get_suites(BENCHMARK_VERSION)[name]
        self.guard = build_guard(name, _tools(self.suite), guard_setting)
        self.system = load_system_message(None)
        self.attack = _Attack(self.suite)

    def run(self, task: BaseUserTask, injection: BaseInjectionTask | None, guarded: bool,
            injections: dict[str, str]) -> Outcome:
        """One run, scored like AgentDojo's `run_task_with_pipeline` except that checks reading the trace of calls
        get the calls that ran (a refused call changed nothing); the attempted calls give `attack_attempted`."""
        env = task.init_environment(self.suite.load_and_inject_default_environment(injections))
        pre = env.model_copy(deep=True)
        executor = GuardedToolsExecutor(self.guard if guarded else None, self.name)
        agent = ScriptedAgent(task, injection, list(injections.values()))
        pipeline = scripted_pipeline(agent, executor, self.system)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, _, post, messages, _ = pipeline.query(task.PROMPT, FunctionsRuntime(self.suite.tools), env)
            said = get_text_content_as_str(messages[-1]["content"] or [])
            attempted = functions_stack_trace_from_messages(messages)
            utility = _check(task, said, pre, post, executor.ran)
            success = injection is not None and _check(injection, said, pre, post, executor.ran)
            tried = injection is not None and _check(injection, said, pre, post, attempted)
        held = executor.last.held if executor.last is not None else []
        obeyed = agent.script is not None and agent.script.attack_calls is not None
        return Outcome(utility, success, tried, held, obeyed)

    def agentdojo_utility(self, task: BaseUserTask) -> bool:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            utility, _ = self.suite.run_task_with_pipeline(GroundTruthPipeline(task), task, None, {})
        return bool(utility)


def evaluate_suite(name: str, user_tasks: list[str] | None = None, progress: Progress | None = None,
                   guard_setting: dict[str, Any] | None = None, own: bool = True) -> SuiteResult:
    """All of `name`'s user tasks (or `user_tasks`) for utility, and every pair with every injection task (and,
    with `own`, with each of our own injection goals)."""
    runner = SuiteRunner(name, guard_setting)
    tasks = {k: v for k, v in runner.suite.user_tasks.items() if user_tasks is None or k in user_tasks}
    injections = runner.suite.injection_tasks
    goals = own_goals(name) if own else {}
    result = SuiteResult(name, len(tasks), len(injections), own_goals=len(goals))
    benign_env = runner.suite.load_and_inject_default_environment({})
    for injection_id, injection in injections.items():
        if not injection.ground_truth(benign_env.model_copy(deep=True)):
            result.no_ground_truth.append(injection_id)
    for task_id, task in tasks.items():
        result.utility_agentdojo += runner.agentdojo_utility(task)
        result.utility_guard_off += runner.run(task, None, False, {}).utility
        benign = runner.run(task, None, True, {})
        result.utility_guard_on += benign.utility
        if not benign.utility:
            calls = [{"tool": h.tool, "arguments": h.arguments, "reasons": list(h.reasons)} for h in benign.held]
            result.refusals.append(Refusal(task_id, task.PROMPT, calls))
        for injection_id, injection in injections.items():
            payloads = runner.attack.attack(task, injection)
            text_only = injection_id in result.no_ground_truth and bool(injection.GROUND_TRUTH_OUTPUT)
            if injection_id in result.no_ground_truth and not text_only:
                continue
            off = runner.run(task, injection, False, payloads)
            on = runner.run(task, injection, True, payloads)
            if text_only:
                result.text_only_pairs += 1
                result.text_only_success_on += on.attack_success
                continue
            result.pairs += 1
            result.attacks_guard_off += off.attack_success
            result.attacks_guard_on += on.attack_success
            result.attempted_guard_on += on.attack_attempted
            result.obeyed_guard_off += off.obeyed
            result.obeyed_guard_on += on.obeyed
            result.utility_under_attack_on += on.utility
            if on.attack_success:
                result.successful_attacks_on.append(f"{task_id} x {injection_id}")
        for goal_id, goal in goals.items():
            payloads = runner.attack.attack(task, goal)
            off = runner.run(task, goal, False, payloads)
            on = runner.run(task, goal, True, payloads)
            result.own_pairs += 1
            result.own_attacks_guard_off += off.attack_success
            result.own_attacks_guard_on += on.attack_success
            result.own_obeyed_guard_on += on.obeyed
            if on.attack_success:
                result.own_successful_on.append(f"{task_id} x {goal_id}")
        if progress is not None:
            progress(task_id)
    return result
