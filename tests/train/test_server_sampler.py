"""Rollouts from a real OpenAI-compatible server, `transformers serve` (the session's shared one, tests/openai_server.py),
with the policy's weights pushed to it: what the server samples is what the local policy would, before and after a
push; ids the server's text does not pin down are flagged and never trained on; GRPO runs through it end to end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from envgym.llm.chat_template import encode_chat
from envgym.play.episode import Trajectory
from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.generation import CachedSampler
from envgym.train.policy import tiny_random_policy
from envgym.train.server_sampler import TransformersServeSampler, save_full_model
from envgym.train.tokens import TrajectoryTokens
from tests.openai_server import LOAD_POST, Server

LOADS = LOAD_POST


def _text(tokenizer: Any, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=True))


@pytest.mark.slow
@pytest.mark.model
def test_a_push_changes_what_the_server_samples_to_what_the_local_policy_samples(
    server: Server, tmp_path: Path
) -> None:
    model, tokenizer = tiny_random_policy(0)
    sampler = TransformersServeSampler(server.base_url, tokenizer, push_dir=tmp_path)
    prompt = encode_chat(tokenizer, [{"role": "user", "content": "What is 2+3?"}], None, add_generation_prompt=True)
    loads = server.count(LOADS)
    served = {}
    for version in (0, 1):
        if version == 1:
            with torch.no_grad():
                model.model.norm.weight.mul_(-1.0)  # an update that turns every logit around
        sampler.push_weights(model, version)
        [remote] = sampler.sample([prompt], max_new_tokens=12, temperature=0.0, seed=0)
        [local] = CachedSampler(model, tokenizer).sample([prompt], max_new_tokens=12, temperature=0.0)
        assert _text(tokenizer, remote.token_ids) == _text(tokenizer, local.token_ids), server.tail()
        # Verified means the ids are the ones sampled, and the logprobs the policy's for them.
        assert remote.verified == (remote.token_ids == local.token_ids)
        if remote.verified:
            assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-4)
        served[version] = remote
    assert _text(tokenizer, served[0].token_ids) != _text(tokenizer, served[1].token_ids)
    # Both outcomes happen here: v0 greedily writes 12 newlines, which re-tokenize into fewer tokens than the
    # server generated (flagged); v1's reply re-tokenizes exactly.
    assert [served[0].verified, served[1].verified] == [False, True]
    assert sampler.model_name is not None and sampler.model_name.endswith("v1")
    assert server.count(LOADS) - loads >= 2


def test_an_unverified_turn_is_context_with_mask_zero(smollm2_tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "hi"}]
    tokens = TrajectoryTokens(smollm2_tokenizer, messages, None)
    prompt_length = len(tokens.current.token_ids)
    ids = smollm2_tokenizer("Hello!", add_special_tokens=False)["input_ids"]
    tokens.add_completion(ids, [-0.5] * len(ids), "Hello!", trainable=False)
    assert tokens.current.token_ids[prompt_length:] == ids
    assert tokens.current.mask[prompt_length:] == [0] * len(ids)
    assert tokens.current.logprobs[prompt_length:] == [0.0] * len(ids)
    assert tokens.trainable_samples() == []


class SpreadReward:
    """Rewards 0, 1, 0, 1... so every group has a spread and every step updates the policy."""

    name = "spread"

    def score(self, episodes: Sequence[Trajectory]) -> list[float]:
        return [float(i % 2) for i in range(len(episodes))]


@pytest.mark.slow
@pytest.mark.model
def test_grpo_samples_through_the_server_and_pushes_each_update(server: Server, tmp_path: Path) -> None:
    config = GRPOConfig(model="tiny-random", output_dir=str(tmp_path / "run"), group_size=2, tasks_per_step=1,
                        max_new_tokens=8, max_sequence_tokens=600, max_turns=1, max_steps=2, save_every=0,
                        heldout_tasks=2, learning_rate=1e-2, seed=1, generation="server", server_url=server.base_url)
    trainer = GRPOTrainer(config, policy=tiny_random_policy(1), reward_source=SpreadReward())
    loads = server.count(LOADS)
    rows = trainer.train()
    assert [row["updated"] for row in rows] == [1.0, 1.0]
    sampler = trainer.sampler
    assert isinstance(sampler, TransformersServeSampler)
    # v0 before the first rollout, v1 after the first update; v2 is pushed when something samples next.
    assert (sampler.version, sampler.stats["pushes"]) == (1, 2)
    assert server.count(LOADS) - loads >= 2
    assert sampler.stats["requests"] == 4
    episodes = [e for group in trainer.last_groups for e in group.episodes]
    assert sum(row["unverified_turns"] for row in rows) == sampler.stats["unverified"]
    for episode in episodes:  # one turn each: an unverified turn leaves nothing to train on
        trained = sum(s.trainable_tokens for s in episode.samples)
        assert trained == (0 if episode.unverified_turns else episode.sampled_tokens)
    trainer.evaluate(trainer.heldout_tasks[:1])
    assert sampler.version == 2 and re.search(r"v2$", str(sampler.model_name))


@pytest.mark.slow
@pytest.mark.model
def test_the_default_gguf_policy_is_pushed_as_a_plain_folder_of_its_own_weights(
    tmp_path: Path, fresh_gguf: tuple[Any, Any]
) -> None:
    # transformers flags a GGUF-loaded model as quantized and its save_pretrained refuses it, though the
    # policy's weights are plain float tensors: the push must still write them. `load_policy("local")` reads the
    # converted cache (not flagged), so the model comes from a fresh GGUF load, as with ENVGYM_MODEL_CACHE=0.
    from safetensors.torch import load_file

    model, tokenizer = fresh_gguf
    assert model.hf_quantizer is not None
    save_full_model(model, tokenizer, tmp_path / "pushed")
    config = json.loads((tmp_path / "pushed" / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    saved, state = load_file(str(tmp_path / "pushed" / "model.safetensors")), model.state_dict()
    assert "model.embed_tokens.weight" in saved and set(saved) <= set(state)
    assert all(torch.equal(tensor, state[name]) for name, tensor in saved.items())
