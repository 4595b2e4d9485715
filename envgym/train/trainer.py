"""`GRPOTrainer`: rollouts -> rewards -> group advantages -> masked clipped loss -> update, sync or async."""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envgym.play.episode import Trajectory
from envgym.play.labelled import labelled_groups
from envgym.rewards.combine import RewardSource, build_reward_source
from envgym.train import distributed
from envgym.train.checkpoints import load_checkpoint, load_extra, save_checkpoint
from envgym.train.config import GRPOConfig
from envgym.train.curriculum import PromptCurriculum, balanced_task, task_strata, uniform_task
from envgym.train.generation import CachedSampler, float32
from envgym.train.learner import StepBatches
from envgym.train.loss import group_advantages, policy_loss
from envgym.train.plot import plot_reward_curve
from envgym.train.policy import load_policy
from envgym.train.rollout import (
    Group,
    GroupBuffer,
    RolloutLimits,
    RolloutWorker,
    check_staleness,
    run_group,
    run_groups,
)
from envgym.train.server_engines import ServerSampler, make_sampler
from envgym.train.step_metrics import gather_rollouts, rollout_metrics


def make_env(env_id: str, server_url: str | None = None, token_file: str | None = None) -> Any:
    """A fresh env: from the Gymnasium registry (importing envgym registers the bundled suite), or a RemoteEnv
    session on the env server at `server_url`, which must serve `env_id`."""
    import gymnasium as gym

    import envgym  # registers envgym/* ids

    if server_url is None:
        return gym.make(env_id)
    env = envgym.RemoteEnv(server_url, token_file=token_file)
    if env.env_id != env_id:
        env.close()
        raise ValueError(f"env_server_url {server_url} serves {env.env_id!r}, but env_id is {env_id!r}")
    return env


class GRPOTrainer:
    """Trains a causal LM with GRPO on an envgym environment.

    Outputs in `config.output_dir`: `metrics.jsonl` (one row per step), `reward_curve.png`,
    `checkpoint-<step>/` (model, optimizer and trainer state; the newest two are kept).
    """

    def __init__(
        self,
        config: GRPOConfig,
        *,
        policy: tuple[Any, Any] | None = None,
        reward_source: RewardSource | None = None,
        env_factory: Callable[[], Any] | None = None,
        console: Console | None = None,
    ) -> None:
        self.config = config
        self.console = console or Console(stderr=True)
        model, self.tokenizer = policy if policy is not None else load_policy(config.model, config.seed)
        if config.use_lora:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(
                model,
                LoraConfig(
                    r=config.lora_r,
                    lora_alpha=config.lora_alpha,
                    lora_dropout=config.lora_dropout,
                    target_modules=list(config.lora_target_modules),
                    task_type="CAUSAL_LM",
                ),
            )
        distributed.broadcast_parameters(model)  # ranks start from rank 0's weights (no-op in one process)
        self.model = model
        # The KL reference is the policy as GRPO starts (after any warm start), frozen by `train`.
        self.reference: Any = None
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=config.learning_rate,
            weight_decay=config.weight_decay,
        )
        self.sampler: Any = make_sampler(config, model, self.tokenizer)  # in-process, or an inference server
        self.env_factory = env_factory or (
            lambda: make_env(config.env_id, config.env_server_url, config.env_server_token_file)
        )
        lockstep = config.tasks_per_step if config.lockstep_groups else 1
        self.envs = [self.env_factory() for _ in range(config.group_size * lockstep)]
        # A RemoteEnv shows observations only: the task list comes from the local copy of the environment.
        local = self.envs[0].unwrapped
        if not hasattr(local, "data"):
            local = make_env(config.env_id).unwrapped
        solutions = {task.id: task.solution for task in local.data.tasks}  # for reward 'env+program'
        self.reward_source = reward_source or build_reward_source(
            config.reward, config.judge_model, config.judge_weight, config.tool_call_weight, solutions,
            labelled=labelled_groups,  # a judge is checked on it before its first score counts
            credit_requires_answer=config.credit_requires_answer)
        task_ids = [task.id for task in local.data.tasks]
        if config.heldout_tasks >= len(task_ids):
            raise ValueError(
                f"GRPOConfig.heldout_tasks={config.heldout_tasks} leaves no training task "
                f"({config.env_id} has {len(task_ids)})"
            )
        split = len(task_ids) - config.heldout_tasks
        self.train_tasks, self.heldout_tasks = task_ids[:split], task_ids[split:]
        training = set(self.train_tasks)
        self.task_strata = None if config.balance_tasks_by is None else task_strata(
            [task for task in local.data.tasks if task.id in training], config.balance_tasks_by)
        self.limits = RolloutLimits(config.max_new_tokens, config.max_sequence_tokens, config.max_turns)
        self.output_dir = Path(config.output_dir)
        self.metrics_path = self.output_dir / "metrics.jsonl"
        self.rollouts_path = self.output_dir / "rollouts.jsonl"  # the saved samples `envgym view` reads
        self.step = 0
        self.version = 0
        self.dropped_stale = 0  # this rank's; the metrics row sums every rank's
        # This rank's groups of every step (all of them in one process): whole groups, fixed by rank and count.
        self.shard = distributed.GroupShard.for_rank(config.tasks_per_step)
        self.last_groups: list[Group] = []  # the newest step's groups (experiments/train_calculator.py --profile)
        self.curriculum = PromptCurriculum.for_trainer(model, self.tokenizer, self.envs[0], config)  # None: uniform

    # ------------------------------------------------------------------ rollouts

    def _sync_server(self) -> None:
        """An inference server samples from the weights of `self.version`: push them when it has others."""
        if isinstance(self.sampler, ServerSampler) and self.sampler.version != self.version:
            self.sampler.push_weights(self.model, self.version)

    def _task_for(self, index: int) -> str:
        if self.task_strata is not None:
            return balanced_task(self.task_strata, self.config.seed, index)
        return uniform_task(self.train_tasks, self.config.seed, index)

    def _make_groups(self, indices: list[int], tasks: list[str], version: int, sampler: Any,
                     envs: list[Any]) -> list[Group]:
        """The groups of global `indices` (task "": the uniform sampler's), one after another or, with
        `lockstep_groups`, all in one lockstep batch; group k's seeds derive from its index alone."""
        tasks = [task or self._task_for(index) for index, task in zip(indices, tasks, strict=True)]
        seeds = [self.config.seed * 100_003 + index for index in indices]
        spans = [(0, len(indices))] if self.config.lockstep_groups and indices else [(k, k + 1) for k in range(len(indices))]
        return [group for start, stop in spans for group in run_groups(
            envs[: (stop - start) * self.config.group_size], tasks[start:stop], seeds[start:stop], sampler,
            self.limits, temperature=self.config.temperature, policy_version=version)]

    def evaluate(self, task_ids: list[str] | None = None) -> dict[str, float]:
        """Greedy success rate (reward >= 1) and mean reward on `task_ids` (default: the held-out tasks).
        Under torch.distributed the ranks split the chunks of `group_size` tasks and sum the results, so every
        rank returns what one process would."""
        tasks = list(task_ids if task_ids is not None else self.heldout_tasks)
        size = self.config.group_size
        chunks = [tasks[start : start + size] for start in range(0, len(tasks), size)]
        self._sync_server()
        rewards: list[float] = []
        with float32(self.sampler):  # whatever the rollouts' sampler_dtype
            for chunk in distributed.shard(chunks):
                episodes = run_group(self.envs[: len(chunk)], chunk, self.sampler, self.limits, temperature=0.0,
                                     seed=self.config.seed)
                rewards.extend(e.reward for e in episodes)
        successes, total, count = distributed.all_reduce_sum(
            [sum(r >= 1.0 for r in rewards), sum(rewards), len(rewards)]
        )
        return {"success_rate": successes / max(count, 1), "reward_mean": total / max(count, 1), "tasks": count}

    # ------------------------------------------------------------------ learning

    def _reference_logprobs(self, batches: StepBatches) -> list[torch.Tensor]:
        """Per micro-batch log-probabilities under the frozen reference (LoRA: the base model)."""
        with torch.no_grad():
            if self.reference is not None:
                prefix = batches.prefix_forward(self.reference, grad=False)
                return [batches.logprobs(self.reference, m, self.config.temperature, prefix) for m in batches.micro]
            with self.model.disable_adapter():  # LoRA: the frozen base model is the reference
                prefix = batches.prefix_forward(self.model, grad=False)
                return [batches.logprobs(self.model, m, self.config.temperature, prefix) for m in batches.micro]

    def _update(self, groups: list[Group]) -> dict[str, float]:
        """One optimizer step on `groups`, this rank's share of the step's groups (all of them in one process):
        under torch.distributed each rank learns from its whole groups with the denominators of all ranks and
        the gradients summed (see `envgym.train.distributed`)."""
        cfg = self.config
        kept: list[tuple[int, int, Any]] = []
        advantages = torch.zeros((0, 0))
        if groups:
            rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float64)
            advantages, keep = group_advantages(
                rewards,
                scale=cfg.scale_rewards,
                std_floor=cfg.std_floor,
                zero_std_tolerance=cfg.zero_std_tolerance,
                negative_weight=cfg.negative_advantage_weight,
            )
            kept = [(g, j, e) for g, group in enumerate(groups) if keep[g] for j, e in enumerate(group.episodes)]
        samples = [sample for _, _, episode in kept for sample in episode.samples]
        # Sync rollouts sample with the current weights; async ones at most max_staleness updates behind.
        bound = cfg.max_staleness if cfg.async_rollouts else 0
        staleness = check_staleness(samples, self.version, bound)
        # A split episode is one sequence: its samples share the advantage and, for "grpo", one token count.
        sample_advantage = [float(advantages[g, j]) for g, j, episode in kept for _ in episode.samples]
        episode_tokens = [float(sum(s.trainable_tokens for s in episode.samples))
                          for _, _, episode in kept for _ in episode.samples]
        batches = StepBatches(samples, cfg.micro_batch_size, self.sampler.pad_token_id, cfg.learner_dtype) if samples else None
        counts = distributed.GlobalCounts.gather(
            len(kept), sum(s.trainable_tokens for s in samples), len(batches.micro) if batches else 0
        )
        n_samples = distributed.all_reduce_sum([len(samples)])[0]
        stale = distributed.all_reduce_sum([sum(lag > 0 for lag in staleness)])[0]
        stats: dict[str, float] = {"updated": 0.0, "samples": n_samples, "episodes": float(counts.sequences),
                                   "stale_samples": stale}
        if n_samples == 0:  # the same on every rank: all skip together
            return stats
        n_tokens = counts.tokens
        totals = {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "is_weight": 0.0}
        grad_norm = 0.0
        self.model.train()
        old: list[torch.Tensor] | None = None
        if cfg.num_iterations > 1 and batches is not None:
            with torch.no_grad():
                prefix = batches.prefix_forward(self.model, grad=False)
                old = [batches.logprobs(self.model, m, cfg.temperature, prefix) for m in batches.micro]
        reference = self._reference_logprobs(batches) if cfg.beta and batches is not None else None
        params = [p for p in self.model.parameters() if p.requires_grad]
        for _ in range(cfg.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            if batches is not None:
                prefix = batches.prefix_forward(self.model, grad=True)
                for index, micro in enumerate(batches.micro):
                    logprobs = batches.logprobs(self.model, micro, cfg.temperature, prefix)
                    out = policy_loss(
                        logprobs,
                        old[index] if old is not None else logprobs.detach(),  # one pass: pi_old is the policy
                        torch.tensor([sample_advantage[r] for r in micro.rows]),
                        micro.mask,
                        loss_type=cfg.loss_type,
                        epsilon_low=cfg.epsilon_low,
                        epsilon_high=cfg.epsilon_high,
                        beta=cfg.beta,
                        ref_logprobs=reference[index] if reference is not None else None,
                        behaviour_logprobs=micro.behaviour,
                        tis_cap=cfg.tis_cap,
                        max_length=cfg.max_sequence_tokens,
                        num_sequences=counts.sequences,
                        num_tokens=n_tokens,
                        sequence_tokens=torch.tensor([episode_tokens[r] for r in micro.rows]),
                    )
                    loss = out.loss / counts.micro_batches if cfg.loss_type == "bnpo" else out.loss
                    loss.backward()
                    share = out.tokens / max(n_tokens, 1) / cfg.num_iterations
                    totals["loss"] += loss.item() / cfg.num_iterations
                    totals["kl"] += out.kl * share
                    totals["clip_fraction"] += out.clip_fraction * share
                    totals["is_weight"] += out.is_weight_mean * share
                prefix.backward()
            distributed.all_reduce_gradients(params)
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            grad_norm += float(norm) / cfg.num_iterations
            self.optimizer.step()
        forwarded = batches.forwarded_tokens if batches else 0
        padding = batches.padding_tokens if batches else 0
        summed = distributed.all_reduce_sum([*totals.values(), forwarded, padding])
        stats.update(dict(zip(totals, summed[: len(totals)], strict=True)), grad_norm=grad_norm, updated=1.0,
                     trainable_tokens=float(n_tokens), forwarded_tokens=summed[-2], padding_tokens=summed[-1])
        return stats

    def freeze_reference(self) -> None:
        """Freeze a copy of the current policy as the KL reference (beta != 0, full weights), once: `train`
        calls it, so a warm start done between construction and `train` is part of the reference."""
        if self.reference is None and self.config.beta != 0.0 and not self.config.use_lora:
            self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> Path:
        """Write `checkpoint-<step>/` atomically and prune old ones (see `envgym.train.checkpoints`)."""
        extras = {"curriculum": self.curriculum.state_dict()} if self.curriculum is not None else None
        return save_checkpoint(self.output_dir, self.model, self.optimizer, self.config, self.step, self.version,
                               reference=self.reference, extras=extras)

    def load_checkpoint(self, where: str) -> Path:
        """Restore weights, optimizer, step and version from `where` ('latest' or a checkpoint dir)."""
        path, self.step, self.version, reference = load_checkpoint(
            self.output_dir, where, self.model, self.optimizer, self.config
        )
        if reference is not None:
            self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
            self.reference.load_state_dict(reference)
        if self.curriculum is not None:
            self.curriculum.load_state_dict(load_extra(path, "curriculum"))
        for log in (self.metrics_path, self.rollouts_path):
            if distributed.is_main() and log.exists():  # rows written after this checkpoint belong to the abandoned run
                rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
                kept = [row for row in rows if row.get("step", 0) < self.step]
                log.write_text("".join(json.dumps(r) + "\n" for r in kept))
        return path

    # ------------------------------------------------------------------ the loop

    def train(self, max_seconds: float | None = None) -> list[dict[str, Any]]:
        """Run until `config.max_steps` (or the first step end past `max_seconds`); returns this run's
        metric rows (also in metrics.jsonl). A checkpoint is saved at the last step either way."""
        cfg = self.config
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if cfg.resume_from:
            self.load_checkpoint(cfg.resume_from)
        self.freeze_reference()
        worker = self._start_worker() if cfg.async_rollouts else None
        buffer = worker.buffer if worker is not None else None
        rows: list[dict[str, Any]] = []
        deadline = None if max_seconds is None else time.perf_counter() + max_seconds
        columns = (
            TextColumn("[bold]GRPO"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
        )
        try:
            with Progress(*columns, console=self.console, transient=False) as progress:
                bar = progress.add_task("", total=cfg.max_steps, completed=self.step)
                while self.step < cfg.max_steps:
                    started = time.perf_counter()
                    groups = self.rollout(buffer)
                    rollout_s = time.perf_counter() - started
                    ranks = gather_rollouts(groups, rollout_s, self.dropped_stale)
                    learn = self._update(groups)
                    learn["update_s"] = time.perf_counter() - started - rollout_s
                    learn.update(self.curriculum.stats if self.curriculum is not None else {})
                    self.last_groups = groups
                    rollout = rollout_metrics(ranks, self.version, cfg.zero_std_tolerance)
                    row = {"step": self.step, **rollout, **learn}
                    self.step += 1
                    if learn["updated"]:
                        self.version += 1
                        if worker is not None:
                            worker.publish(
                                {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                                self.version,
                            )
                    if worker is not None:
                        worker.finish_step()
                    row["step_s"] = time.perf_counter() - started
                    if cfg.eval_every and self.step % cfg.eval_every == 0:
                        row.update({f"eval_{k}": v for k, v in self.evaluate().items()})
                    if distributed.is_main():  # rank 0 writes metrics and checkpoints
                        with self.metrics_path.open("a", encoding="utf-8") as handle:
                            handle.write(json.dumps(row) + "\n")
                        if cfg.save_rollouts_every and row["step"] % cfg.save_rollouts_every == 0:
                            self._save_rollouts(row["step"], groups)
                    rows.append(row)
                    out_of_time = deadline is not None and time.perf_counter() >= deadline
                    out_of_time = distributed.all_reduce_sum([out_of_time])[0] > 0  # ranks stop together
                    periodic = cfg.save_every and self.step % cfg.save_every == 0
                    if (periodic or self.step == cfg.max_steps or out_of_time) and distributed.is_main():
                        self.save_checkpoint()
                    progress.update(
                        bar,
                        completed=self.step,
                        description=(
                            f"reward {row['reward_mean']:.3f}  loss {row.get('loss', 0.0):+.4f}  {row['step_s']:.1f}s/step"
                        ),
                    )
                    if out_of_time:
                        break
        finally:
            if worker is not None:
                worker.stop()
        if distributed.is_main():
            plot_reward_curve(self.metrics_path, self.output_dir / "reward_curve.png")
        return rows

    def _save_rollouts(self, step: int, groups: list[Group]) -> None:
        """Append this rank's episodes of `step` to rollouts.jsonl: each a `Trajectory` (no token samples) with the
        step, the policy version that sampled it and its training reward."""
        trajectory_fields = [f.name for f in dataclasses.fields(Trajectory)]
        with self.rollouts_path.open("a", encoding="utf-8") as handle:
            for group in groups:
                for i, episode in enumerate(group.episodes):
                    line = {name: getattr(episode, name) for name in trajectory_fields}
                    reward = group.rewards[i] if i < len(group.rewards) else None
                    line.update(step=step, policy_version=group.policy_version, training_reward=reward)
                    handle.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")

    def rollout(self, buffer: GroupBuffer | None = None) -> list[Group]:
        """This rank's groups of the current step, scored: made now with the current policy, or taken from the
        async `buffer`, which drops any group older than `max_staleness` versions. Every rank checks the step
        and version it holds against the others first, so the bound is measured from the same version on
        every rank (their weights at one version are equal: they take the same update)."""
        distributed.check_same("step and policy version", [self.step, self.version])
        if buffer is not None:
            groups = [buffer.get(self.version) for _ in range(self.shard.size)]
            self.dropped_stale = buffer.dropped
        else:
            self._sync_server()
            indices = self.shard.step_indices(self.step)
            tasks = [""] * len(indices) if self.curriculum is None else self.curriculum.step_tasks(
                self.step, self._task_for, len(self.train_tasks), len(indices))
            groups = self._make_groups(list(indices), tasks, self.version, self.sampler, self.envs)
        for group in groups:
            group.rewards = self.reward_source.score(group.episodes)
        if self.curriculum is not None:
            self.curriculum.observe([(g.task_id, [e.success for e in g.episodes]) for g in groups])
        return groups

    def _start_worker(self) -> RolloutWorker | None:
        """A rollout thread with its own copy of the policy and its own envs, making this rank's share of each
        step's groups from the current step on (none for a rank whose share is empty): the groups a synchronous
        step would make (same tasks and seeds, lockstep or not), started up to `max_staleness` steps ahead, so
        with 1 the rollouts of step k + 1 run while the learner updates on step k."""
        if self.shard.size == 0:
            return None
        model = copy.deepcopy(self.model).eval()
        sampler = CachedSampler(model, self.tokenizer, self.config.sampler_dtype)
        envs = [self.env_factory() for _ in range(len(self.envs))]
        first_step = self.step
        worker = RolloutWorker(
            GroupBuffer(self.config.buffer_size, self.config.max_staleness),
            lambda index, version: self._make_groups(
                self.shard.step_indices(first_step + index), [""] * self.shard.size, version, sampler, envs),
            model.load_state_dict,
            lead=self.config.max_staleness,
        )
        worker.version = self.version
        worker.start()
        return worker
