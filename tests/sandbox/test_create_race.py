"""The first creates on a fresh `envgym serve` arrive together: each one gets a working session.

The environment is the bundled calculator copied under another name with a `tools.py` that takes 0.3 s to load
(a real first import takes milliseconds; the sleep holds that window open so the test does not depend on luck).
On the old code the creates that arrived while the first one was loading `tools.py` found it half-run in
`sys.modules` and failed with "module 'tools' has no function 'calculate'".
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import httpx
import pytest

from tests.sandbox.serving import REPO_ROOT, start_serve

CREATES = 16


def test_concurrent_first_creates_on_a_fresh_server_all_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "envs" / "slowcalc"
    shutil.copytree(REPO_ROOT / "environments" / "calculator", folder)
    tools = folder / "tools.py"
    source = tools.read_text()
    # After the imports, before any function: the window in which the module exists but has no functions yet.
    marker = "from envgym.world import ToolError, WorldState\n"
    assert marker in source
    tools.write_text(source.replace(marker, marker + "import time\n\ntime.sleep(0.3)\n", 1))
    monkeypatch.setenv("ENVGYM_ENV_DIRS", str(folder.parent))
    served = start_serve(env="slowcalc")
    try:
        headers = {"Authorization": f"Bearer {served.token()}"}
        start = threading.Barrier(CREATES)
        answers: list[tuple[int, str]] = []

        def create() -> None:
            with httpx.Client(base_url=served.url, headers=headers, timeout=120) as client:
                start.wait()
                reply = client.post("/v1/env/sessions", json={})
                answers.append((reply.status_code, reply.text[:300]))

        threads = [threading.Thread(target=create) for _ in range(CREATES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
        failed = [text for status, text in answers if status != 200]
        assert len(answers) == CREATES and failed == []
    finally:
        assert served.stop() == 0
