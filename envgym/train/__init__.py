"""The bundled GRPO trainer: token-in/token-out rollouts over envgym envs, a masked GRPO loss, sync/async."""

from envgym.train.config import GRPOConfig
from envgym.train.trainer import GRPOTrainer

__all__ = ["GRPOConfig", "GRPOTrainer"]
