"""The code environment: sandboxed tools, hidden-test grading in a fresh sandbox, and cheating that gains nothing.

Runs on the local sandbox backend (the default); the docker-marked test repeats the oracle in real containers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envgym  # noqa: F401 (registers envgym/code-v0)
from envgym.env import ToolWorldEnv
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy
from envgym.world.spec import TaskSpec

ENV_ID = "envgym/code-v0"


def call(name: str, **args: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def tool_result(env: ToolWorldEnv, action: str) -> dict[str, Any]:
    _, _, _, _, info = env.step(action)
    result: dict[str, Any] = json.loads(info["messages"][-1]["content"])
    return result


def task_of(env: ToolWorldEnv) -> TaskSpec:
    assert env.task is not None, "reset() first"
    return env.task


def make_env(**kwargs: Any) -> ToolWorldEnv:
    environment = gym.make(ENV_ID, **kwargs).unwrapped
    assert isinstance(environment, ToolWorldEnv)
    return environment


def finish(env: ToolWorldEnv) -> tuple[float, dict[str, float]]:
    """Tell the user we are done and end the episode; returns the reward and its components."""
    _, reward, terminated, truncated, info = env.step("Done: solution.py is written. ###STOP###")
    assert terminated or truncated
    return float(reward), info["reward_components"]


def host_fraction(task: TaskSpec, source: str) -> float:
    """What share of the hidden tests `source` passes, computed here on the host as a reference."""
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    fn = namespace[task.meta["function"]]
    cases = task.meta["hidden_tests"]
    return sum(json.loads(json.dumps(fn(*c["args"]))) == c["expected"] for c in cases) / len(cases)


@pytest.fixture
def env() -> Iterator[ToolWorldEnv]:
    environment = make_env(task="code_is_prime")
    yield environment
    environment.close()


def test_suite_has_thirty_tasks_with_more_hidden_than_visible_tests() -> None:
    tasks = make_env().data.tasks
    assert len(tasks) >= 30
    for task in tasks:
        assert len(task.meta["hidden_tests"]) >= 10 > len(task.meta["visible_tests"]) >= 2


def test_workspace_starts_with_only_the_visible_tests(env: ToolWorldEnv) -> None:
    obs, info = env.reset(seed=0)
    listing = tool_result(env, call("run_python", code="import os; print(sorted(os.listdir('.')))"))
    assert listing["stdout"].strip() == "['test_solution.py']"
    test_file = tool_result(env, call("read_file", path="test_solution.py"))["content"]
    for case in task_of(env).meta["visible_tests"]:
        assert repr(case["expected"]) in test_file
    # Hidden arguments (e.g. a large generated number) appear nowhere the agent can look.
    seen = obs + json.dumps(env.messages) + json.dumps(info["tools"]) + test_file
    hidden_only = [c for c in task_of(env).meta["hidden_tests"] if str(c["args"][0]) not in json.dumps(task_of(env).meta["visible_tests"])]
    assert hidden_only and not any(str(c["args"][0]) in seen for c in hidden_only if abs(c["args"][0]) > 100)


def test_run_tests_reports_failure_then_success(env: ToolWorldEnv) -> None:
    env.reset(seed=0)
    assert tool_result(env, call("run_tests"))["passed"] is False
    tool_result(env, call("write_file", path="solution.py", content=task_of(env).solution[0].arguments["content"]))
    result = tool_result(env, call("run_tests"))
    assert result["passed"] is True and "2/2 visible tests passed" in result["stdout"]


def test_reward_is_the_fraction_of_hidden_tests_passed(env: ToolWorldEnv) -> None:
    env.reset(seed=0)
    partial = "def is_prime(n):\n    return n in (2, 3, 5, 7, 11, 13)\n"
    tool_result(env, call("write_file", path="solution.py", content=partial))
    reward, components = finish(env)
    expected = host_fraction(task_of(env), partial)
    assert 0.0 < expected < 1.0
    assert components["hidden_tests"] == pytest.approx(expected) and reward == pytest.approx(expected)


def test_next_episode_does_not_see_the_previous_solution(env: ToolWorldEnv) -> None:
    env.reset(seed=0)
    tool_result(env, call("write_file", path="solution.py", content=task_of(env).solution[0].arguments["content"]))
    assert finish(env)[0] == 1.0
    env.reset(seed=0)
    listing = tool_result(env, call("run_python", code="import os; print(sorted(os.listdir('.')))"))
    assert listing["stdout"].strip() == "['test_solution.py']"
    assert finish(env)[0] == 0.0


CHEATS = {
    # conftest.py that turns every pytest test into a pass, and a rewritten visible test file.
    "conftest.py": "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
                   "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n",
    "test_solution.py": "def test_ok():\n    assert True\n",
    "test_hidden.py": "def test_all():\n    pass\n",
    "results.json": "[]",
}
# A wrong solution that also tries to forge the grader's results file and exit before the real run.
FORGING_SOLUTION = (
    "import json, os\n"
    "json.dump([{'value': True}] * 1000, open('results.json', 'w'))\n"
    "def is_prime(n):\n    return True\n"
)


def test_cheating_agent_gains_nothing(env: ToolWorldEnv) -> None:
    env.reset(seed=0)
    tool_result(env, call("write_file", path="solution.py", content=FORGING_SOLUTION))
    honest_reward, _ = finish(env)

    env.reset(seed=0)
    for path, content in CHEATS.items():
        tool_result(env, call("write_file", path=path, content=content))
    tool_result(env, call("write_file", path="solution.py", content=FORGING_SOLUTION))
    tool_result(env, call("run_python", code="import os; os.remove('test_solution.py')"))
    cheat_reward, components = finish(env)

    assert cheat_reward == honest_reward == pytest.approx(host_fraction(task_of(env), "def is_prime(n):\n    return True\n"))
    assert cheat_reward < 0.5 and components["hidden_tests"] == cheat_reward


def test_solution_that_exits_or_hangs_at_import_or_call_scores_zero(env: ToolWorldEnv) -> None:
    hangs = "def is_prime(n):\n    while True:\n        pass\n"
    for source in ("import os\nos._exit(0)\n", "while True:\n    pass\n", hangs):
        env.reset(seed=0)
        tool_result(env, call("write_file", path="solution.py", content=source))
        assert finish(env)[0] == 0.0


@pytest.mark.parametrize("args", [
    {"path": "../escape.py", "content": "x"},
    {"path": "/etc/evil.py", "content": "x"},
    {"path": "solution.py", "content": "\ud800"},
])
def test_bad_write_is_an_error_observation(env: ToolWorldEnv, args: dict[str, str]) -> None:
    env.reset(seed=0)
    assert "error" in tool_result(env, call("write_file", **args))


def test_reading_a_missing_file_is_an_error_observation(env: ToolWorldEnv) -> None:
    env.reset(seed=0)
    assert "no file 'nope.py'" in tool_result(env, call("read_file", path="nope.py"))["error"]


def test_check_env_passes_on_code_env() -> None:
    environment = make_env()
    check_env(environment)
    environment.close()


any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)
tool_calls = st.builds(
    lambda name, args: call(name, **args),
    st.sampled_from(["write_file", "read_file", "run_tests", "run_python", "nope"]),
    st.dictionaries(st.sampled_from(["path", "content", "code", "extra"]), any_text, max_size=3),
)


def test_random_tool_calls_never_raise() -> None:
    environment = make_env(max_steps=10**6)
    environment.reset(seed=0)

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.one_of(tool_calls, any_text))
    def step_once(action: str) -> None:
        obs, reward, terminated, truncated, _ = environment.step(action)
        assert isinstance(obs, str) and reward == 0.0
        if terminated or truncated:
            environment.reset(seed=0)

    step_once()
    environment.close()


@pytest.mark.docker
def test_oracle_scores_one_in_docker_and_hidden_tests_are_not_in_the_container(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from envgym.sandbox.docker import docker_available

    if not docker_available():
        pytest.skip("no Docker engine on this machine (scripts/ci_docker.sh starts one)")
    monkeypatch.setenv("ENVGYM_CODE_BACKEND", "docker")
    environment = make_env()
    for task_id in ("code_to_roman", "code_spiral_order"):
        assert run_episode(environment, OraclePolicy(), options={"task_id": task_id}).reward == 1.0
    environment.reset(options={"task_id": "code_to_roman"})
    probe = "import os, sys; print(os.getcwd(), os.path.exists('/opt/envgym/src/environments/code'))"
    assert tool_result(environment, call("run_python", code=probe))["stdout"].split() == ["/workspace", "False"]
    environment.close()
