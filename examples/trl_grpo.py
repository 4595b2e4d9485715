"""Train with TRL's GRPOTrainer on a multi-turn envgym environment, through TRL's own environment hook.

`envgym.integrations.trl.trl_environment(env)` is the class TRL's `environment_factory` wants: one instance per
rollout, `reset(**row)` starting the row's task, one tool method per world tool plus `send_message_to_user` (the
agent's turn to the simulated user), and `get_reward()` (the env's own grade). TRL runs the model's tool calls
against it turn after turn; nothing else scores the rollout.

Run: `python examples/trl_grpo.py --env retail --model tiny-random --max-steps 2`
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.integrations.trl import trl_dataset, trl_environment


def chat_tokenizer(tokenizer: Any) -> Any:
    """SmolLM2 speaks ChatML but its template has no tools; Qwen2.5's ChatML template (shipped with TRL) renders
    Hermes tool calls, and TRL knows how to parse replies in it."""
    import trl

    tokenizer = copy.deepcopy(tokenizer)  # the GGUF tokenizer is cached per process: leave the shared one alone
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    return tokenizer


def build_trainer(model: Any, tokenizer: Any, env: str, *, max_steps: int, output_dir: str,
                  task_ids: list[str] | None = None, **config: Any) -> Any:
    """A GRPOTrainer whose rollouts run in `env` through `environment_factory`, rewarded by the env alone;
    `config` overrides GRPOConfig fields."""
    from trl import GRPOConfig, GRPOTrainer

    settings: dict[str, Any] = dict(
        output_dir=output_dir,
        max_steps=max_steps,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=96,
        max_tool_calling_iterations=2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        learning_rate=1e-4,
        seed=0,
    )
    return GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=GRPOConfig(**{**settings, **config}),
        train_dataset=trl_dataset(env, task_ids, repeat=max(1, max_steps)),
        environment_factory=trl_environment(env),
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="retail")
    parser.add_argument("--model", default="tiny-random", help="'tiny-random', 'local' or a model directory")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--output-dir", default="runs/trl-grpo")
    args = parser.parse_args(argv)

    from envgym.train.policy import load_policy

    model, tokenizer = load_policy(args.model, seed=0)
    trainer = build_trainer(model, chat_tokenizer(tokenizer), args.env, max_steps=args.max_steps,
                            output_dir=args.output_dir)
    result = trainer.train()
    summary = {"steps": trainer.state.global_step, "train_loss": result.training_loss,
               "log": trainer.state.log_history}
    print(json.dumps(summary, default=str))
    return summary


if __name__ == "__main__":
    main()
