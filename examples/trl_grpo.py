"""Train with TRL's GRPOTrainer on an envgym environment: its tools become TRL tools, its grader the reward.

`make_trl_environment(env_id)` builds a class in the shape TRL's `environment_factory` expects: one method
per envgym tool (signature and docstring generated from the tool's JSON Schema, so TRL renders it for the
chat template), `reset(**row)` starting the row's task. `envgym_reward` sends each final answer to its env,
which grades the episode. Run: `python examples/trl_grpo.py --model tiny-random --max-steps 2`.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
from pathlib import Path
from typing import Any

import gymnasium as gym

import envgym  # noqa: F401  (registers envgym/* ids)

JSON_TO_PY = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict, "array": list}


def _tool_method(env_tool: dict[str, Any]) -> Any:
    function = env_tool["function"]
    name, schema = function["name"], function.get("parameters") or {}
    properties: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))

    def call(self: Any, **arguments: Any) -> str:
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
        }
        _, _, _, _, info = self.env.step(message)
        return str(info["messages"][-1]["content"])

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for arg, spec in properties.items():
        default = inspect.Parameter.empty if arg in required else None
        params.append(
            inspect.Parameter(
                arg,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=JSON_TO_PY.get(spec.get("type", "string"), str),
            )
        )
    call.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in params[1:]} | {"return": str}
    args_doc = "\n".join(f"    {arg}: {spec.get('description', arg)}" for arg, spec in properties.items())
    call.__doc__ = f"{function.get('description', name)}\n\nArgs:\n{args_doc}\n"
    call.__name__ = call.__qualname__ = name
    return call


def make_trl_environment(env_id: str) -> type:
    """A TRL `environment_factory` class whose tool methods run `env_id`'s tools on a live episode."""
    probe = gym.make(env_id)
    _, info = probe.reset(seed=0)
    members: dict[str, Any] = {tool["function"]["name"]: _tool_method(tool) for tool in info["tools"]}

    def __init__(self: Any) -> None:
        self.env = gym.make(env_id)

    def reset(self: Any, task_id: str, **row: Any) -> None:
        self.env.reset(seed=0, options={"task_id": task_id})

    members.update(__init__=__init__, reset=reset)
    return type("EnvgymTRLEnvironment", (), members)


def envgym_reward(completions: list[Any], environments: list[Any], **kwargs: Any) -> list[float | None]:
    """Send each rollout's final assistant text to its env and return the env's verifiable reward."""
    rewards: list[float | None] = []
    for completion, holder in zip(completions, environments, strict=True):
        final = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        _, reward, terminated, truncated, _ = holder.env.step(final)
        while not (terminated or truncated):  # the scripted user may ask again: the answer stands
            _, reward, terminated, truncated, _ = holder.env.step(final)
        rewards.append(float(reward))
    return rewards


def task_dataset(env_id: str, limit: int) -> Any:
    """One row per task: the opening conversation (system + user) as `prompt` and the `task_id`."""
    from datasets import Dataset

    env = gym.make(env_id)
    rows = []
    for task in env.unwrapped.data.tasks[:limit]:  # type: ignore[attr-defined]
        _, info = env.reset(seed=0, options={"task_id": task.id})
        rows.append({"prompt": info["messages"], "task_id": task.id})
    return Dataset.from_list(rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="envgym/calculator-v0")
    parser.add_argument("--model", default="tiny-random", help="'tiny-random', 'local' or a model directory")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--output-dir", default="runs/trl-grpo")
    args = parser.parse_args(argv)

    import trl
    from trl import GRPOConfig, GRPOTrainer

    from envgym.train.policy import load_policy

    model, tokenizer = load_policy(args.model, seed=0)
    tokenizer = copy.deepcopy(
        tokenizer
    )  # the GGUF tokenizer is cached per process: don't change the shared one
    # SmolLM2 speaks ChatML but its template has no tools; Qwen2.5's ChatML template (shipped with TRL) renders
    # Hermes tool calls and TRL knows how to parse its replies.
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=32,
        max_tool_calling_iterations=2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        learning_rate=1e-4,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=config,
        reward_funcs=[envgym_reward],
        train_dataset=task_dataset(args.env, 16),
        environment_factory=make_trl_environment(args.env),
    )
    result = trainer.train()
    summary = {
        "steps": trainer.state.global_step,
        "train_loss": result.training_loss,
        "log": trainer.state.log_history,
    }
    print(json.dumps(summary, default=str))
    return summary


if __name__ == "__main__":
    main()
