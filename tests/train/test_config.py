"""GRPOConfig: the documented defaults are the real ones, YAML loading, and errors that name the field."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from envgym.train.config import GRPOConfig, documented_default

PINNED_DEFAULTS = {
    "env_id": "envgym/calculator-v0",
    "heldout_tasks": 8,
    "max_turns": 4,
    "env_server_url": None,
    "env_server_token_file": None,
    "model": "local",
    "use_lora": False,
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "group_size": 8,
    "tasks_per_step": 2,
    "sampler": "uniform",
    "balance_tasks_by": None,
    "pcl_candidates": 16,
    "pcl_explore": 0.25,
    "pcl_head_steps": 50,
    "pcl_head_lr": 0.01,
    "pcl_buffer": 256,
    "temperature": 1.0,
    "max_new_tokens": 96,
    "max_sequence_tokens": 1024,
    "generation": "local",
    "server_url": None,
    "server_kind": "transformers",
    "server_push_dir": None,
    "loss_type": "dapo",
    "scale_rewards": True,
    "std_floor": 1e-3,
    "zero_std_tolerance": 1e-6,
    "negative_advantage_weight": 1.0,
    "epsilon_low": 0.2,
    "epsilon_high": 0.28,
    "beta": 0.0,
    "tis_cap": 2.0,
    "num_iterations": 1,
    "learning_rate": 1e-5,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "micro_batch_size": 4,
    "learner_dtype": "float32",
    "sampler_dtype": "float32",
    "max_steps": 50,
    "seed": 0,
    "lockstep_groups": False,
    "async_rollouts": False,
    "buffer_size": 4,
    "max_staleness": 1,
    "reward": "env",
    "judge_model": "local",
    "judge_weight": 0.5,
    "tool_call_weight": 0.1,
    "credit_requires_answer": False,
    "output_dir": "runs/grpo",
    "save_every": 25,
    "save_rollouts_every": 1,
    "resume_from": None,
    "eval_every": 0,
}


def test_defaults_are_pinned() -> None:
    assert GRPOConfig().to_dict() == PINNED_DEFAULTS


def test_every_field_documents_its_real_default() -> None:
    config = GRPOConfig()
    for field in dataclasses.fields(GRPOConfig):
        help_text = field.metadata.get("help", "")
        assert help_text, f"{field.name} has no help text"
        assert documented_default(help_text) == repr(getattr(config, field.name)), field.name


def test_yaml_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "grpo.yaml"
    path.write_text("loss_type: dr_grpo\ngroup_size: 4\ntis_cap: null\nlora_target_modules: [q_proj]\n")
    config = GRPOConfig.from_yaml(path)
    assert (config.loss_type, config.group_size, config.tis_cap) == ("dr_grpo", 4, None)
    assert config.lora_target_modules == ["q_proj"]


def test_unknown_key_names_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("learning_rat: 0.1\n")
    with pytest.raises(ValueError, match=r"bad.yaml: unknown GRPOConfig field\(s\) \['learning_rat'\]"):
        GRPOConfig.from_yaml(path)


def test_wrong_type_and_invalid_value_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("loss_type: ppo\n")
    with pytest.raises(ValueError, match="loss_type"):
        GRPOConfig.from_yaml(path)
    with pytest.raises(ValueError, match="group_size=1"):
        GRPOConfig(group_size=1)
    with pytest.raises(ValueError, match=r"negative_advantage_weight=1\.5"):
        GRPOConfig(negative_advantage_weight=1.5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"generation": "server"}, "generation 'server' needs a server_url"),
        ({"server_url": "http://127.0.0.1:8000"}, "generation 'server' needs a server_url, and only it uses one"),
        ({"generation": "server", "server_url": "http://h:1", "async_rollouts": True}, "generation 'server' is synchronous"),
        ({"generation": "server", "server_url": "http://h:1", "server_kind": "vllm"}, "only as LoRA adapters"),
    ],
)
def test_a_server_generation_that_cannot_work_is_refused_with_the_reason(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**fields)


def test_the_train_command_maps_the_server_flags_onto_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    from envgym.cli import main

    assert main(["train", "--generation", "server", "--server-kind", "sglang"]) == 2
    assert "generation 'server' needs a server_url" in capsys.readouterr().err
    assert main(["train", "--generation", "server", "--server-url", "http://127.0.0.1:9", "--server-kind", "vllm"]) == 2
    assert "only as LoRA adapters" in capsys.readouterr().err
