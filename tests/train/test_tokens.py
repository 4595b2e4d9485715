"""Token-in/token-out trajectories with SmolLM2's real tokenizer and chat template."""

from __future__ import annotations

import copy
import json
from typing import Any

from envgym.llm.chat_template import prepare_messages
from envgym.protocol import format_tool_call
from envgym.train.tokens import TrajectoryTokens

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
OPENING = [
    {"role": "system", "content": "Use the calculator."},
    {"role": "user", "content": "What is 1234 * 5678?"},
]


def _sampled(tokenizer: Any, text: str) -> tuple[list[int], list[float]]:
    """What a sampler emitting the canonical tokenization of `text` would return (eos included)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return ids, [-0.5] * len(ids)


def _tool(call_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": "calculate", "content": json.dumps(payload)}


def _play(tokenizer: Any, turns: list[tuple[str, list[dict[str, Any]]]]) -> TrajectoryTokens:
    trajectory = TrajectoryTokens(tokenizer, OPENING, TOOLS)
    for index, (text, env_messages) in enumerate(turns):
        ids, logprobs = _sampled(tokenizer, text)
        trajectory.add_completion(ids, logprobs, text)
        if index < len(turns) - 1:
            assert trajectory.add_messages(env_messages)
    return trajectory


def _full_render(tokenizer: Any, trajectory: TrajectoryTokens) -> list[int]:
    plain, template_tools = prepare_messages(tokenizer, trajectory.messages, TOOLS)
    assert template_tools is None  # SmolLM2's template has no tools: they live in the system message
    rendered = tokenizer.apply_chat_template(plain, tokenize=True, add_generation_prompt=False)
    return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)


def _check_concatenation_equals_full_render(tokenizer: Any, trajectory: TrajectoryTokens) -> None:
    assert len(trajectory.samples) == 1 and trajectory.prefix_mismatches == 0
    sample = trajectory.samples[0]
    full = _full_render(tokenizer, trajectory)
    # The template closes the last assistant turn with "<|im_end|>\n"; the sampler stops at <|im_end|>.
    assert sample.token_ids == full[: len(sample.token_ids)]
    assert tokenizer.decode(full[len(sample.token_ids) :]) == "\n"
    assert len(sample.mask) == len(sample.token_ids) == len(sample.logprobs)
    spans, current = [], []
    for token, bit in zip(sample.token_ids, sample.mask, strict=True):
        if bit:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    spans.append(current)
    assistant = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
    assert [tokenizer.decode(span) for span in spans] == [f"{text}<|im_end|>" for text in assistant]
    assert all(lp == (-0.5 if bit else 0.0) for lp, bit in zip(sample.logprobs, sample.mask, strict=True))


def test_tool_call_and_tool_result(smollm2_tokenizer: Any) -> None:
    call = format_tool_call("calculate", {"expression": "1234 * 5678"})
    trajectory = _play(
        smollm2_tokenizer,
        [
            (call, [_tool("call_1_0", {"result": 7006652})]),
            ("1234 * 5678 = 7006652", []),
        ],
    )
    _check_concatenation_equals_full_render(smollm2_tokenizer, trajectory)


def test_parallel_tool_calls_and_a_user_turn(smollm2_tokenizer: Any) -> None:
    calls = "I will compute both.\n" + "\n".join(
        [
            format_tool_call("calculate", {"expression": "1234 * 5678"}),
            format_tool_call("calculate", {"expression": "2 + 2"}),
        ]
    )
    trajectory = _play(
        smollm2_tokenizer,
        [
            (calls, [_tool("call_1_0", {"result": 7006652}), _tool("call_1_1", {"result": 4})]),
            ("The product is 7006652.", [{"role": "user", "content": "And the sum?"}]),
            ("The sum is 4.", []),
        ],
    )
    _check_concatenation_equals_full_render(smollm2_tokenizer, trajectory)


def test_failed_tool_call_result(smollm2_tokenizer: Any) -> None:
    trajectory = _play(
        smollm2_tokenizer,
        [
            (
                '<tool_call>{"name": "calculate", "arguments": {"expr": 1}}</tool_call>',
                [_tool("call_1_0", {"error": "unknown argument 'expr'; expected 'expression'"})],
            ),
            ("Sorry.", []),
        ],
    )
    _check_concatenation_equals_full_render(smollm2_tokenizer, trajectory)


def test_non_canonical_sampled_tokens_are_kept_and_the_env_text_joined(smollm2_tokenizer: Any) -> None:
    tokenizer = smollm2_tokenizer
    trajectory = TrajectoryTokens(tokenizer, OPENING, TOOLS)
    # "hello" sampled one character at a time re-tokenizes to fewer tokens: the token prefix check fails, but
    # the tokens decode to the render's text, so the sample goes on with them exactly as sampled.
    odd = [tokenizer.convert_tokens_to_ids(ch) for ch in "hello"] + [tokenizer.eos_token_id]
    assert tokenizer.decode(odd[:-1]) == "hello"
    prompt = list(trajectory.current.token_ids)
    trajectory.add_completion(odd, [-1.0] * len(odd), "hello")
    assert trajectory.add_messages([{"role": "user", "content": "Please use the tool."}]) is True
    assert trajectory.prefix_mismatches == 0 and trajectory.noncanonical_joins == 1
    (sample,) = trajectory.samples
    assert sample.token_ids[: len(prompt) + len(odd)] == prompt + odd
    assert sample.mask == [0] * len(prompt) + [1] * len(odd) + [0] * (len(sample.token_ids) - len(prompt) - len(odd))
    assert tokenizer.decode(sample.token_ids) == tokenizer.decode(_full_render(tokenizer, trajectory)) + (
        "<|im_start|>assistant\n"
    )
    (trained,) = trajectory.trainable_samples()
    assert trained.token_ids == prompt + odd  # the env tokens after the last sampled one are not trained on


def test_a_template_that_rewrites_history_starts_a_new_sample(smollm2_tokenizer: Any) -> None:
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    tokenizer.chat_template = tokenizer.chat_template.replace("message['content']", "message['content'] | trim")
    trajectory = TrajectoryTokens(tokenizer, OPENING, TOOLS)
    ids, logprobs = _sampled(tokenizer, "hello  ")  # the template trims the two spaces off when re-rendering
    trajectory.add_completion(ids, logprobs, "hello  ")
    assert trajectory.add_messages([{"role": "user", "content": "Please use the tool."}]) is False
    assert trajectory.prefix_mismatches == 1 and len(trajectory.samples) == 2
    first, second = trajectory.samples
    assert first.token_ids[-len(ids) :] == ids and first.mask[-len(ids) :] == [1] * len(ids)
    assert second.trainable_tokens == 0
    assert tokenizer.decode(second.token_ids).endswith(
        "hello<|im_end|>\n<|im_start|>user\nPlease use the tool.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert trajectory.trainable_samples() == [first]
