"""Connection and session budgets: derived from the file descriptor limit and memory, or set by `envgym serve`
flags (`envgym.sandbox.limits`)."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys

import httpx
import pytest

from envgym.sandbox.limits import SessionLimits, available_memory_bytes
from tests.sandbox.serving import child_env, start_serve

BUDGET = (
    "import json, resource\n"
    "from envgym.sandbox.limits import ServerLimits\n"
    "budget = ServerLimits(max_connections={max_connections}).connection_budget()\n"
    "print(json.dumps([budget, *resource.getrlimit(resource.RLIMIT_NOFILE)]))\n"
)


def _budget_in_child(soft: int, hard: int, max_connections: int | None) -> tuple[int, int, int]:
    """(connection budget, soft limit, hard limit) in a fresh process started with RLIMIT_NOFILE (soft, hard)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    out = subprocess.run(
        [sys.executable, "-c", BUDGET.format(max_connections=max_connections)],
        capture_output=True, text=True, env=child_env(), preexec_fn=limit, timeout=120, check=True,
    )  # fmt: skip
    budget, new_soft, new_hard = json.loads(out.stdout)
    return budget, new_soft, new_hard


def test_the_soft_fd_limit_is_raised_to_the_hard_one_and_bounds_the_connections() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    budget, soft, new_hard = _budget_in_child(256, hard, None)
    assert (soft, new_hard) == (hard, hard)
    assert 256 - 128 < budget <= hard - 128  # fd_reserve kept free; memory may lower it further


def test_a_max_connections_above_the_fd_limit_is_lowered_to_it() -> None:
    assert _budget_in_child(300, 300, 5000)[0] == 300 - 128
    assert _budget_in_child(300, 300, 50)[0] == 50


def test_the_session_budget_is_the_flag_or_a_share_of_the_available_memory() -> None:
    assert SessionLimits(max_sessions=7).session_budget() == 7
    derived = SessionLimits(session_bytes=1 << 20, session_memory_share=0.5).session_budget()
    assert 1 <= derived <= available_memory_bytes() // (1 << 20)


def test_serve_flags_set_both_budgets_and_the_session_budget_is_enforced() -> None:
    served = start_serve("--max-sessions", "3", "--max-connections", "5")
    try:
        lines = "".join(served.stderr)
        assert re.search(r"budgets: 5 connections per process, 3 sessions", lines), lines
        headers = {"Authorization": f"Bearer {served.token()}"}
        with httpx.Client(base_url=served.url, headers=headers, timeout=120) as client:
            assert [client.post("/v1/env/sessions", json={}).status_code for _ in range(3)] == [200] * 3
            refused = client.post("/v1/env/sessions", json={})
            assert refused.status_code >= 400 and "too many sessions (3)" in refused.text
    finally:
        assert served.stop() == 0


@pytest.mark.parametrize("flag", ["--max-sessions", "--max-connections"])
def test_a_budget_below_one_is_a_clear_error(flag: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "envgym.cli", "serve", "calculator", "--port", "0", "--no-auth", flag, "0"],
        capture_output=True, text=True, env=child_env(), timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and f"{flag}: expected at least 1, got 0" in out.stderr
