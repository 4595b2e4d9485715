"""ScriptedChatModel, CachedChatModel and load_chat_model."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from envgym.llm import CachedChatModel, CacheMissError, ChatModel, ScriptedChatModel, load_chat_model

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_scripted_model_replies_in_order_and_fails_past_the_script() -> None:
    model = ScriptedChatModel(["one", "two"])
    assert isinstance(model, ChatModel)
    assert model.chat(MESSAGES).text == "one"
    assert model.chat(MESSAGES).text == "two"
    with pytest.raises(IndexError, match="only 2 replies"):
        model.chat(MESSAGES)


def test_scripted_model_reply_fn_sees_the_conversation() -> None:
    model = ScriptedChatModel(reply_fn=lambda messages, tools: f"{len(messages)}:{messages[-1]['content']}")
    assert model.chat(MESSAGES).text == "2:hi"


def test_cache_replays_a_recorded_run_without_calling_the_model(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    recorder = CachedChatModel(ScriptedChatModel(["first", "second"]), path, mode="record")
    assert recorder.chat(MESSAGES).text == "first"
    assert recorder.chat(MESSAGES, temperature=0.7, seed=3).text == "second"

    replayer = CachedChatModel(ScriptedChatModel([]), path, mode="replay")
    assert replayer.chat(MESSAGES).text == "first"
    assert replayer.chat(MESSAGES, temperature=0.7, seed=3).text == "second"
    assert replayer.hits == 2


def test_cache_replay_miss_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    replayer = CachedChatModel(ScriptedChatModel([]), path, mode="replay")
    with pytest.raises(CacheMissError, match=str(path)):
        replayer.chat(MESSAGES)


def test_cache_key_covers_tools_and_params(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    model = CachedChatModel(ScriptedChatModel(["a", "b", "c", "d"]), path, mode="auto")
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    texts = [
        model.chat(MESSAGES).text,
        model.chat(MESSAGES, [tool]).text,
        model.chat(MESSAGES, max_tokens=5).text,
        model.chat(MESSAGES).text,
    ]
    assert texts == ["a", "b", "c", "a"]
    assert (model.hits, model.misses) == (1, 3)


def test_concurrent_appends_write_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"

    def record(worker: int) -> None:
        model = CachedChatModel(ScriptedChatModel(reply_fn=lambda m, t: "x" * 5000), path, mode="record")
        for i in range(40):
            model.chat([{"role": "user", "content": f"{worker}-{i}"}])

    threads = [threading.Thread(target=record, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = path.read_text().splitlines()
    assert len(lines) == 160
    assert all(json.loads(line)["response"]["text"] == "x" * 5000 for line in lines)


def test_load_chat_model_specs() -> None:
    assert load_chat_model("scripted", replies=["ok"]).chat(MESSAGES).text == "ok"
    assert load_chat_model("openai:qwen", base_url="http://127.0.0.1:1/v1").name == "openai:qwen"
    with pytest.raises(ValueError, match="unknown model spec 'nope'"):
        load_chat_model("nope")
    with pytest.raises(ValueError, match="names no model"):
        load_chat_model("openai:")
