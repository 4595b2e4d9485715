"""examples/trl_grpo.py: envgym tools and reward plugged into TRL's GRPOTrainer."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_env_tools_become_trl_tools_that_run_on_the_live_episode() -> None:
    from transformers.utils import get_json_schema

    example = _example()
    holder = example.make_trl_environment("envgym/calculator-v0")()
    holder.reset(task_id="mul_000")
    schema = get_json_schema(holder.calculate)
    assert schema["function"]["name"] == "calculate"
    assert schema["function"]["parameters"]["required"] == ["expression"]
    assert "29051123" in holder.calculate(expression="4867 * 5969")
    # The env grades the final answer: right answer 1.0, wrong answer 0.0.
    right = example.envgym_reward([[{"role": "assistant", "content": "4867 * 5969 = 29051123"}]], [holder])
    wrong_holder = example.make_trl_environment("envgym/calculator-v0")()
    wrong_holder.reset(task_id="mul_000")
    wrong = example.envgym_reward([[{"role": "assistant", "content": "It is 5."}]], [wrong_holder])
    assert (right, wrong) == ([1.0], [0.0])


@pytest.mark.slow
def test_trl_grpo_trains_a_tiny_model_with_envgym_tools(tmp_path: Path) -> None:
    summary = _example().main(["--model", "tiny-random", "--max-steps", "1", "--output-dir", str(tmp_path)])
    assert summary["steps"] == 1
    assert "tools/call_frequency" in summary["log"][0]
