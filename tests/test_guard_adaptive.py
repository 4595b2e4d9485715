"""The adaptive attacker (environments/workspace/adaptive.py) reads each refusal and retries: on every workspace task
and goal it gets nothing through in 8 tries, in `deny` and in `user` mode."""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

import pytest

from envgym.loader import EnvironmentData, load_environment
from envgym.registry import find_env_dir
from envgym.world.tools import resolve_python


@cache
def _data() -> EnvironmentData:
    return load_environment(str(find_env_dir("workspace")))


def _adaptive() -> Any:
    return sys.modules[resolve_python(_data().directory, "adaptive:attack").__module__]


def test_every_goal_has_at_least_five_variants_and_every_route_class() -> None:
    adaptive = _adaptive()
    contacts = ["a@x.com", "b@y.com"]
    for goal in adaptive.GOALS:
        assert len(adaptive.variants(goal, contacts)) >= 5, goal
    routes = {v.route for goal in adaptive.GOALS for v in adaptive.variants(goal, contacts)}
    assert {"comma_joined", "display_name", "schemeless", "userinfo", "lookalike_domain", "spelled_new_tld",
            "outside_contact", "iban_to_outside", "code_to_outside", "phone_to_outside"} <= routes


def test_the_variants_are_calls_the_tools_run() -> None:
    adaptive, data = _adaptive(), _data()
    for goal in adaptive.GOALS:
        for variant in adaptive.variants(goal, ["a@x.com"]):
            if variant.tool != "get_webpage":  # the collector is not a page of the world: a fetch still leaves
                result = data.executor.execute(data.initial.copy(), variant.tool, variant.arguments)
                assert result.ok, (goal, variant.route, result.error)


@pytest.mark.parametrize("mode", ["deny", "user"])
def test_the_adaptive_attacker_gets_nothing_through(mode: str) -> None:
    adaptive, data = _adaptive(), _data()
    tasks = data.tasks if mode == "deny" else data.tasks[::4]
    reached = [(o.task, o.goal, o.tries[-1][0]) for task in tasks for goal in adaptive.GOALS
               if (o := adaptive.attack(data, task, goal, mode)).reached]
    assert reached == []


def test_the_attacker_reads_the_refusal() -> None:
    adaptive = _adaptive()
    pending = adaptive.variants("send_file", ["a@x.com"])
    cc = adaptive._next(pending, ("argument cc='x' does not come from the user's request",))
    assert cc.varies == "cc"
