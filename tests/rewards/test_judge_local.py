"""The judge with the real local SmolLM2-135M-Instruct on a group of retail trajectories.

A 135M model seldom writes the score JSON unaided, so the local judge decodes it under a grammar
(`envgym.rewards.constrained`): the JSON skeleton is forced and the model picks each score among valid numbers
and writes each explanation. These tests check that this really yields valid scores from the model.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from envgym.llm.local import default_gguf_path, load_gguf_model
from envgym.rewards.constrained import GuidedLocalJudge
from envgym.rewards.judge import RelativeJudge, load_judge_model
from envgym.rewards.judge_prompt import parse_scores

pytestmark = [pytest.mark.model, pytest.mark.slow]

Messages = list[dict[str, Any]]


def test_local_guided_judge_scores_four_retail_trajectories(
    retail_messages: list[Messages], retail_tools: Messages, retail_rubric: str | None
) -> None:
    model = load_judge_model("local", max_explanation_tokens=12)
    judge = RelativeJudge(model)
    assert isinstance(model, GuidedLocalJudge), "the default judge model is the guided local SmolLM2"

    assert retail_rubric is not None, "retail tasks carry rubric criteria"
    result = judge.score_group(retail_messages, retail_tools, retail_rubric)

    assert result.status == "scored", result.error
    assert result.scores is not None and [s.trajectory_id for s in result.scores] == [1, 2, 3, 4]
    assert all(0.0 <= s.score <= 1.0 for s in result.scores)
    assert all(s.explanation and "\n" not in s.explanation for s in result.scores)
    assert judge.metrics.model_calls == 1 and judge.metrics.parse_failures == 0
    assert judge.metrics.prompt_tokens > 0 and judge.metrics.completion_tokens > 0


class RandomLM:
    """Stands in for the transformer inside the guided decoder: seeded random next-token logits, with random
    strong preferences for the grammar's decision tokens (closing quote and brace, the digits 0 and 1), so
    every branch of the grammar is taken. The decoder's grammar, not this model, is what is under test."""

    def __init__(self, vocab_size: int, favourites: list[int], seed: int) -> None:
        import torch

        self.config = SimpleNamespace(vocab_size=vocab_size, max_position_embeddings=8192)
        self.favourites = favourites
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, input_ids: Any, cache: Any, use_cache: bool, logits_to_keep: int) -> SimpleNamespace:
        import torch

        logits = torch.randn(self.config.vocab_size, generator=self.generator)
        boost = torch.rand(len(self.favourites), generator=self.generator) < 0.4
        logits[torch.tensor(self.favourites)[boost]] += 20.0
        return SimpleNamespace(logits=logits.view(1, 1, -1), cache=None)


@pytest.mark.parametrize("seed", range(6))
def test_guided_decoding_always_yields_valid_score_json(seed: int) -> None:
    _, tokenizer = load_gguf_model(str(default_gguf_path()))
    favourites = [tokenizer.encode(t, add_special_tokens=False)[0] for t in ('"', "}", "0", "1")]
    lm = RandomLM(len(tokenizer), favourites, seed)
    guided = GuidedLocalJudge(lm, tokenizer, max_explanation_tokens=6)
    n = 2 + seed % 3

    reply = guided.chat_scores([{"role": "user", "content": "Score these."}], n)

    scores = parse_scores(reply.text, n)
    assert [s.trajectory_id for s in scores] == list(range(1, n + 1))
    assert all(re.fullmatch(r"0\.\d\d?|1\.0", f"{s.score}") for s in scores)
    assert all(s.explanation.strip() for s in scores)
    assert reply.usage["completion_tokens"] == len(reply.completion_token_ids or [])
