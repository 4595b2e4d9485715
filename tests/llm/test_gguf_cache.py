"""The converted model cache (envgym.llm.gguf_cache) gives what a fresh GGUF load gives: the same tensors bit for
bit, the same config, the same tokenizer and chat template; and an entry that is damaged is rebuilt, never used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from envgym.llm import gguf_cache
from envgym.llm.chat_template import encode_chat, render_chat
from envgym.llm.local import default_gguf_path, load_gguf_model, load_gguf_tokenizer

pytestmark = [pytest.mark.model, pytest.mark.slow]

TEXTS = ["Hello, world!", "  leading spaces\tand\ttabs\n\nnew lines", "Où est la commande O1 ? 東京 🚀",
         "<|im_start|>user\nhi<|im_end|>", '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>',
         "1234 * 5678 = 7006652", ""]
TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Get an order.",
                                           "parameters": {"type": "object",
                                                          "properties": {"order_id": {"type": "string"}}}}}]
CONVERSATIONS = [
    [{"role": "user", "content": "Où est O1 ?"}],
    [{"role": "system", "content": "Help with orders."}, {"role": "user", "content": "Where is O1?"},
     {"role": "assistant", "content": '<tool_call>{"name": "get_order", "arguments": {"order_id": "O1"}}</tool_call>'},
     {"role": "tool", "content": '{"status": "shipped"}'}],
]
# Config entries that say where a model came from, not what it computes: the cached model is not GGUF-flagged.
PROVENANCE = {"quantization_config", "_name_or_path", "architectures"}


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().view(torch.uint8)


def assert_same_model(cached: Any, fresh: Any) -> None:
    assert type(cached) is type(fresh) and not cached.training
    ours, theirs = cached.state_dict(), fresh.state_dict()
    assert list(ours) == list(theirs)
    for name, tensor in theirs.items():
        assert ours[name].dtype == tensor.dtype == torch.float32 and ours[name].shape == tensor.shape, name
        assert torch.equal(_bits(ours[name]), _bits(tensor)), f"{name} differs"
    tied = [m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr() for m in (cached, fresh)]
    assert tied[0] == tied[1]
    mine, gguf = cached.config.to_dict(), fresh.config.to_dict()
    assert {k: v for k, v in mine.items() if k not in PROVENANCE} == {k: v for k, v in gguf.items() if k not in PROVENANCE}
    assert cached.config._attn_implementation == fresh.config._attn_implementation
    assert cached.generation_config.to_dict() == fresh.generation_config.to_dict()
    ids = torch.tensor([[1, 9690, 198, 22503, 28, 2260, 30, 2]])
    with torch.no_grad():
        assert torch.equal(_bits(cached(ids).logits), _bits(fresh(ids).logits))


def assert_same_tokenizer(cached: Any, fresh: Any) -> None:
    assert type(cached) is type(fresh)
    assert cached.chat_template == fresh.chat_template and isinstance(fresh.chat_template, str)
    assert cached.get_vocab() == fresh.get_vocab() and len(cached) == len(fresh)
    assert cached.special_tokens_map == fresh.special_tokens_map
    assert (cached.bos_token_id, cached.eos_token_id, cached.pad_token_id) == (
        fresh.bos_token_id, fresh.eos_token_id, fresh.pad_token_id)
    assert {i: str(t) for i, t in cached.added_tokens_decoder.items()} == {
        i: str(t) for i, t in fresh.added_tokens_decoder.items()}
    for text in TEXTS:
        ids = fresh.encode(text)
        assert cached.encode(text) == ids, text
        assert cached.decode(ids, skip_special_tokens=False) == fresh.decode(ids, skip_special_tokens=False)
    for messages in CONVERSATIONS:
        for tools in (None, TOOLS):
            assert render_chat(cached, messages, tools, add_generation_prompt=True) == render_chat(
                fresh, messages, tools, add_generation_prompt=True)
            assert encode_chat(cached, messages, tools, add_generation_prompt=True) == encode_chat(
                fresh, messages, tools, add_generation_prompt=True)


def test_the_cached_model_and_tokenizer_are_the_gguf_ones(fresh_gguf: tuple[Any, Any]) -> None:
    # What every other test and process loads (install.sh converted it) against a fresh read of the GGUF file.
    model, tokenizer = load_gguf_model(str(default_gguf_path()))
    assert_same_model(model, fresh_gguf[0])
    assert_same_tokenizer(tokenizer, fresh_gguf[1])
    assert load_gguf_tokenizer(str(default_gguf_path())) is tokenizer
    # The one difference: the GGUF load is flagged as quantized (its save_pretrained refuses), the cached one is not.
    assert fresh_gguf[0].hf_quantizer is not None and getattr(model, "hf_quantizer", None) is None


class Conversions:
    """`gguf_cache.cached` for one part, in a cache of its own, with the fresh objects as what converting gives."""

    def __init__(self, kind: str, fresh: Any) -> None:
        self.kind, self.fresh, self.count = kind, fresh, 0
        self.write = {"model": gguf_cache._write_model, "tokenizer": gguf_cache._write_tokenizer}[kind]
        self.read = {"model": gguf_cache._read_model, "tokenizer": gguf_cache._read_tokenizer}[kind]

    def convert(self) -> Any:
        self.count += 1
        return self.fresh

    def load(self) -> Any:
        return gguf_cache.cached(default_gguf_path(), self.kind, self.convert, self.write, self.read)

    @property
    def folder(self) -> Path:
        return gguf_cache.entry_dir(default_gguf_path()) / self.kind


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path))
    monkeypatch.delenv(gguf_cache.CACHE_SWITCH, raising=False)
    return tmp_path


def test_a_model_entry_with_one_flipped_weight_byte_is_rebuilt_not_used(
    own_cache: Path, fresh_gguf: tuple[Any, Any]
) -> None:
    parts = Conversions("model", fresh_gguf[0])
    first = parts.load()
    assert parts.count == 1 and parts.folder.is_relative_to(own_cache)
    assert parts.load() is not first and parts.count == 1  # the second load reads the entry
    weights = parts.folder / gguf_cache.WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x40  # inside the last tensor: safetensors alone would load it without a word
    weights.write_bytes(bytes(data))
    assert gguf_cache.problem(default_gguf_path(), "model", parts.folder) is not None
    rebuilt = parts.load()
    assert parts.count == 2
    assert_same_model(rebuilt, fresh_gguf[0])
    assert gguf_cache.problem(default_gguf_path(), "model", parts.folder) is None


@pytest.mark.parametrize("damage", ["truncated", "manifest missing", "file missing", "other transformers"])
def test_a_damaged_or_foreign_tokenizer_entry_is_rebuilt_not_used(
    own_cache: Path, fresh_gguf: tuple[Any, Any], damage: str
) -> None:
    parts = Conversions("tokenizer", fresh_gguf[1])
    parts.load()
    folder = parts.folder
    manifest = folder / gguf_cache.MANIFEST
    if damage == "truncated":
        (folder / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes()[:1000])
    elif damage == "manifest missing":  # as a copy interrupted half-way would leave it
        manifest.unlink()
    elif damage == "file missing":
        (folder / "tokenizer_config.json").unlink()
    else:
        recorded = json.loads(manifest.read_text())
        manifest.write_text(json.dumps({**recorded, "transformers": "0.0.1"}))
    reason = gguf_cache.problem(default_gguf_path(), "tokenizer", folder)
    assert reason is not None
    assert_same_tokenizer(parts.load(), fresh_gguf[1])
    assert parts.count == 2
    assert gguf_cache.problem(default_gguf_path(), "tokenizer", folder) is None
    assert [p.name for p in folder.parent.iterdir()] == ["tokenizer"]  # nothing half-written or set aside is left


def test_the_loser_of_a_race_to_publish_keeps_the_winners_entry(
    own_cache: Path, fresh_gguf: tuple[Any, Any]
) -> None:
    parts = Conversions("tokenizer", fresh_gguf[1])
    parts.load()
    before = {p.name: p.read_bytes() for p in parts.folder.iterdir()}

    def late_and_different(staging: Path) -> None:
        (staging / "tokenizer.json").write_text("{}")

    gguf_cache._publish(default_gguf_path(), "tokenizer", parts.folder, late_and_different)
    assert {p.name: p.read_bytes() for p in parts.folder.iterdir()} == before
    assert [p.name for p in parts.folder.parent.iterdir()] == ["tokenizer"]


def test_the_cache_can_be_switched_off(own_cache: Path, fresh_gguf: tuple[Any, Any],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gguf_cache.CACHE_SWITCH, "0")
    parts = Conversions("tokenizer", fresh_gguf[1])
    assert parts.load() is fresh_gguf[1] and parts.load() is fresh_gguf[1] and parts.count == 2
    assert not any(own_cache.iterdir())
