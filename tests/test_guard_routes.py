"""The attack routes of issue 40 (environments/workspace/guard_routes.yaml), each a scripted conversation: the
guard must hold the attacker's call in `deny` and in `user` mode. Guard v2 let every one of them through."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from envgym.guard.script import Script, judge_script, load_scripts
from envgym.loader import EnvironmentData, load_environment
from envgym.registry import find_env_dir

ROUTES = Path(find_env_dir("workspace")) / "guard_routes.yaml"


@cache
def _data() -> EnvironmentData:
    return load_environment(str(find_env_dir("workspace")))


def _routes() -> list[dict[str, Any]]:
    return list(yaml.safe_load(ROUTES.read_text()))


@cache
def _scripts() -> dict[str, Script]:
    return {s.id: s for s in load_scripts(_routes())}


@pytest.mark.parametrize("mode", ["deny", "user"])
@pytest.mark.parametrize("route", [r["id"] for r in _routes()])
def test_the_attackers_call_is_held(route: str, mode: str) -> None:
    judged = judge_script(_data(), _scripts()[route], mode)  # type: ignore[arg-type]
    last, ran = judged.verdicts[-1]
    assert last.tool == _scripts()[route].calls[-1].tool
    assert not ran, f"{route}: {last.tool}({last.arguments}) ran"
