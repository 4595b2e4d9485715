"""TRL's environment hook over envgym (envgym.integrations.trl) and examples/trl_grpo.py, with the installed TRL."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from envgym.integrations.trl import trl_dataset, trl_environment
from envgym.play.tool_turns import USER_TOOL

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo.py"
CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "4867 * 5969"}}\n</tool_call>'


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_world_tools_and_the_user_become_trl_tools_with_the_worlds_schemas() -> None:
    from transformers.utils import get_json_schema

    episode = trl_environment("retail")()
    schema = get_json_schema(episode.cancel_pending_order)["function"]
    assert schema["parameters"]["required"] == ["order_id", "reason"]
    assert schema["parameters"]["properties"]["reason"]["enum"] == ["no longer needed", "ordered by mistake"]
    assert get_json_schema(getattr(episode, USER_TOOL))["function"]["parameters"]["required"] == ["message"]


def test_a_multi_turn_episode_through_the_hook_is_graded_by_the_env() -> None:
    episode = trl_environment("calculator")()
    assert "4867 * 5969" in episode.reset(task_id="mul_000", seed=0)
    assert "29051123" in episode.calculate(expression="4867 * 5969")
    reply = getattr(episode, USER_TOOL)(message="4867 * 5969 = 29051123")
    assert reply and episode.get_reward() == 1.0
    assert "episode is over" in episode.calculate(expression="1 + 1")
    episode.reset(task_id="mul_000", seed=0)
    assert episode.get_reward() == 0.0  # ended with nothing said: graded, and it fails


def test_the_dataset_carries_the_system_prompt_and_the_task_for_reset() -> None:
    rows = trl_dataset("calculator", ["mul_000"], repeat=2)
    assert rows["task_id"] == ["mul_000", "mul_000"] and rows["seed"] == [0, 1]
    assert rows[0]["prompt"][0]["role"] == "system" and rows[0]["prompt"][1] == {"role": "user", "content": ""}


def _teach_one_tool_call(model: Any, tokenizer: Any, env_class: type) -> None:
    """A few plain torch steps so the tiny random model answers the task's prompt with a tool call: a random model
    never writes one, and this test is about what TRL does with one."""
    import torch

    episode = env_class()
    row = trl_dataset("calculator", ["mul_000"])[0]
    prompt = [row["prompt"][0], {"role": "user", "content": episode.reset(task_id="mul_000", seed=0)}]
    tools = [getattr(episode, name) for name in sorted(n for n in vars(env_class) if not n.startswith("_"))
             if name not in ("env_id", "env_kwargs")]
    text = tokenizer.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    target = tokenizer(CALL + "<|im_end|>", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + target])
    labels = torch.tensor(target)
    optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3)
    torch.manual_seed(0)
    for _ in range(80):
        # Logits of the target's positions only: the vocabulary projection of the prompt is most of the cost.
        logits = model(input_ids=ids, logits_to_keep=len(target) + 1).logits[0, :-1]
        loss = torch.nn.functional.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    greedy = model.generate(torch.tensor([prompt_ids]), max_new_tokens=len(target) + 2, do_sample=False)
    assert tokenizer.decode(greedy[0, len(prompt_ids):]) == CALL + "<|im_end|>"


@pytest.mark.slow
def test_grpo_trains_through_the_environment_hook_and_its_tool_calls_reach_the_env(tmp_path: Path) -> None:
    from envgym.train.policy import load_policy

    example = _example()
    model, tokenizer = load_policy("tiny-random", seed=0)
    tokenizer = example.chat_tokenizer(tokenizer)
    env_class = trl_environment("calculator")
    _teach_one_tool_call(model, tokenizer, env_class)
    # Sampling near the taught reply, so each rollout makes the call; what TRL does with it is under test.
    trainer = example.build_trainer(model, tokenizer, "calculator", max_steps=1, output_dir=str(tmp_path),
                                    task_ids=["mul_000"], temperature=0.3)
    trainer.train()
    assert trainer.state.global_step == 1
    log = trainer.state.log_history[0]
    assert log["tools/call_frequency"] > 0
    assert "rewards/CalculatorEnv/mean" in log  # the env's get_reward is the reward source
    tool_results = [m["content"] for e in trainer.environments for m in e.env.messages if m["role"] == "tool"]
    assert tool_results and all("29051123" in content for content in tool_results)
