"""Trainer checkpoints: `checkpoint-<step>/` with the trainable weights, the optimizer and the trainer state."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from envgym.train.config import GRPOConfig

CHECKPOINT_PREFIX = "checkpoint-"
KEEP_CHECKPOINTS = 2


def trainable_state(model: Any, config: GRPOConfig) -> dict[str, torch.Tensor]:
    """The weights training changes: the LoRA adapter's with `use_lora`, else the whole model's."""
    if config.use_lora:
        from peft import get_peft_model_state_dict

        return dict(get_peft_model_state_dict(model))
    return dict(model.state_dict())


def save_checkpoint(output_dir: Path, model: Any, optimizer: torch.optim.Optimizer, config: GRPOConfig, step: int,
                    version: int, reference: Any = None, extras: dict[str, Any] | None = None) -> Path:
    """Write `checkpoint-<step>/` atomically (a temp dir renamed into place) and keep the newest two; the frozen
    KL reference model, when there is one, goes to `reference.pt`, and each `extras[name]` to `<name>.pt`."""
    final = output_dir / f"{CHECKPOINT_PREFIX}{step:06d}"
    tmp = output_dir / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(trainable_state(model, config), tmp / "model.pt")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    if reference is not None:
        torch.save(reference.state_dict(), tmp / "reference.pt")
    for name, state in (extras or {}).items():
        torch.save(state, tmp / f"{name}.pt")
    state = {"step": step, "version": version, "config": config.to_dict()}
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(output_dir.glob(f"{CHECKPOINT_PREFIX}*"))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old)
    return final


def load_checkpoint(output_dir: Path, where: str, model: Any, optimizer: torch.optim.Optimizer,
                    config: GRPOConfig) -> tuple[Path, int, int, dict[str, torch.Tensor] | None]:
    """Load `where` ('latest' or a checkpoint dir) into `model` and `optimizer`; returns (path, step, version,
    the KL reference's weights or None)."""
    if where == "latest":
        found = sorted(output_dir.glob(f"{CHECKPOINT_PREFIX}*"))
        if not found:
            raise FileNotFoundError(f"resume_from='latest': no {CHECKPOINT_PREFIX}* in {output_dir}")
        path = found[-1]
    else:
        path = Path(where)
    state = json.loads((path / "trainer_state.json").read_text())
    weights = torch.load(path / "model.pt", weights_only=True)
    if config.use_lora:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, weights)
    else:
        model.load_state_dict(weights)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    reference = torch.load(path / "reference.pt", weights_only=True) if (path / "reference.pt").exists() else None
    return path, int(state["step"]), int(state["version"]), reference


def load_extra(path: Path, name: str) -> Any:
    """The `extras[name]` a checkpoint was saved with (see `save_checkpoint`)."""
    file = path / f"{name}.pt"
    if not file.exists():
        raise FileNotFoundError(f"{path}: no {name}.pt to resume from (was this checkpoint saved without it?)")
    return torch.load(file, weights_only=True)
