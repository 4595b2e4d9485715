"""Prompt Curriculum Learning (PCL): a value head predicts the policy's success on a prompt from the policy's own
hidden state, and each step trains on the candidate prompts predicted nearest 50% success.

A group whose G episodes all succeed or all fail has zero reward variance and teaches GRPO nothing; a prompt the
policy solves about half the time gives the most signal. Each step `PromptCurriculum`:
1. draws `pcl_candidates` tasks in the uniform sampler's seeded order (so every task keeps coming round);
2. encodes each candidate's first prompt with the policy, detached: the final hidden state at the last prompt
   token and the mean over the tokens after the prefix all candidates share (`prompt_features`, one forward of
   the shared prefix and one batched forward of the rest);
3. fills the step with the candidates whose predicted success p is nearest 0.5, except that each slot with
   probability `pcl_explore` takes a random candidate instead, one never trained on first;
4. after the step's groups are scored, adds (features, the group's empirical success rate, G) to a buffer and
   fits the head to it by weighted binary cross-entropy, `pcl_head_steps` Adam steps.

The policy is not trained through the head: features are detached, so PCL changes which prompts GRPO sees, never
the loss. Everything random derives from `config.seed` and the step, so a run is deterministic by seed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from envgym.train import distributed
from envgym.train.generation import causal_lm
from envgym.train.tokens import TrajectoryTokens


def uniform_task(train_tasks: Sequence[str], seed: int, index: int) -> str:
    """The `index`-th task of the uniform sampler: a seeded order, reshuffled every pass over the tasks."""
    n = len(train_tasks)
    order = list(range(n))
    random.Random(seed * 7919 + index // n).shuffle(order)
    return train_tasks[order[index % n]]


def task_strata(tasks: Sequence[Any], key: str) -> dict[str, list[str]]:
    """Task ids grouped by the value of `meta[key]` (in task order within a value; values sorted), refusing a task
    without it: a silently unbalanced draw would be worse than none."""
    strata: dict[str, list[str]] = {}
    for task in tasks:
        meta = getattr(task, "meta", None) or {}
        if key not in meta:
            raise ValueError(f"balance_tasks_by={key!r}: task {task.id!r} has no meta[{key!r}] "
                             f"(its meta keys: {sorted(meta)})")
        strata.setdefault(str(meta[key]), []).append(task.id)
    return dict(sorted(strata.items()))


def balanced_task(strata: dict[str, list[str]], seed: int, index: int) -> str:
    """The `index`-th task when draws take the strata in turn: draw `index` comes from stratum `index mod S`, as
    that stratum's `index // S`-th task in its own uniform order. A step of k consecutive draws (k >= S) holds every
    stratum, each within one task of k / S; each stratum's tasks all come round before any comes again."""
    names = list(strata)
    name = names[index % len(names)]
    return uniform_task(strata[name], seed * 31 + names.index(name), index // len(names))


def _shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token of its own."""
    shared = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for prompt in prompts[1:]:
        index = 0
        while index < shared and prompt[index] == first[index]:
            index += 1
        shared = index
    return max(shared, 0)


@torch.no_grad()
def prompt_features(model: Any, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
    """(N, 2H) float32 features of N prompts: the policy's final hidden state at each prompt's last token,
    concatenated with its mean over the prompt's tokens after the prefix all N share.

    The shared prefix (system prompt and tool schemas) runs once; the rest runs as one right-padded batch on
    its keys and values. Neither an attention mask nor a pad token is needed: under causal attention a real token
    only sees earlier positions, which are real, so padding (id 0) changes no real position's state."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompt_features: every prompt needs at least one token")
    decoder = causal_lm(model).get_decoder()
    was_training = model.training
    model.eval()
    try:
        start = _shared_prefix(prompts)
        cache = None
        if start:
            prefix = decoder(input_ids=torch.tensor([list(prompts[0][:start])]), use_cache=True).cache
            rows = len(prompts)
            cache = DynamicCache(
                ddp_cache_data=[(layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1))
                                for layer in prefix.layers]
            )
        lengths = torch.tensor([len(p) - start for p in prompts])
        width = int(lengths.max())
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, : len(prompt) - start] = torch.tensor(list(prompt[start:]))
        positions = torch.arange(start, start + width).unsqueeze(0)
        hidden = decoder(input_ids=ids, position_ids=positions, cache=cache, use_cache=cache is not None)
        states = hidden.last_hidden_state.float()  # (N, W, H)
        real = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)
        mean = (states * real).sum(dim=1) / lengths.unsqueeze(1)
        last = states[torch.arange(len(prompts)), lengths - 1]
        return torch.cat([last, mean], dim=1)
    finally:
        model.train(was_training)


class ValueHead(torch.nn.Module):
    """Predicted success logit of a prompt from its features: a linear map on centred, scaled features. Prompts
    of one environment share most of their hidden state, so the buffer's mean is subtracted and the rest divided
    by its root mean square (one number: per-feature scales blow up on a buffer of one or two prompts)."""

    shift: torch.Tensor
    scale: torch.Tensor

    def __init__(self, features: int, seed: int) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.linear = torch.nn.Linear(features, 1)
        self.register_buffer("shift", torch.zeros(features))
        self.register_buffer("scale", torch.ones(()))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear((features - self.shift) / self.scale).squeeze(-1)

    def fit_standardization(self, features: torch.Tensor) -> None:
        self.shift.copy_(features.mean(dim=0))
        rms = float((features - self.shift).pow(2).mean().sqrt())
        self.scale.fill_(rms if rms > 1e-6 else 1.0)


@dataclass
class Observation:
    """One GRPO group: its prompt's features, the fraction of its episodes that succeeded, and how many."""

    task_id: str
    features: torch.Tensor
    success_rate: float
    episodes: int


class PromptCurriculum:
    """Chooses each step's tasks (see the module docstring) and learns from the groups they produced."""

    def __init__(
        self,
        model: Any,
        prompt_ids: Callable[[str], list[int]],
        *,
        hidden_size: int,
        candidates: int,
        explore: float,
        head_steps: int,
        head_lr: float,
        buffer_size: int,
        seed: int,
    ) -> None:
        self.model = model
        self.prompt_ids = prompt_ids
        self.candidates = candidates
        self.explore = explore
        self.head_steps = head_steps
        self.buffer_size = buffer_size
        self.seed = seed
        self.head = ValueHead(2 * hidden_size, seed)
        self.optimizer = torch.optim.Adam(self.head.parameters(), lr=head_lr)
        self.buffer: list[Observation] = []
        self.seen: set[str] = set()
        self._pending: dict[str, torch.Tensor] = {}
        self.stats: dict[str, float] = {}  # the newest step's, for its metrics row

    @classmethod
    def for_trainer(cls, model: Any, tokenizer: Any, env: Any, config: Any) -> PromptCurriculum | None:
        """The curriculum of a `GRPOConfig` with `sampler='pcl'` (None for 'uniform'), on `model`'s hidden
        state; `env` is reset to read task prompts (the trainer's first env: every rollout resets it anyway)."""
        if config.sampler != "pcl":
            return None
        if distributed.world_size() > 1:
            raise ValueError("GRPOConfig.sampler='pcl' runs in one process (each rank would fit its own value head)")
        return cls(
            model,
            task_prompt_ids(env, tokenizer),
            hidden_size=int(causal_lm(model).config.hidden_size),
            candidates=config.pcl_candidates,
            explore=config.pcl_explore,
            head_steps=config.pcl_head_steps,
            head_lr=config.pcl_head_lr,
            buffer_size=config.pcl_buffer,
            seed=config.seed,
        )

    def step_tasks(self, step: int, task_for: Callable[[int], str], available: int, k: int) -> list[str]:
        """Step `step`'s `k` tasks out of `available` training tasks in the uniform order `task_for`."""
        return self.choose(step, self.candidates_for(step, task_for, k, available), k)[0]

    def candidates_for(self, step: int, task_for: Callable[[int], str], k: int, available: int) -> list[str]:
        """`candidates` distinct tasks (at least `k`) in the uniform order `task_for(index)`, from where
        step `step` of a `candidates`-per-step walk starts; `available` is the number of training tasks."""
        if available < k:
            raise ValueError(f"sampler='pcl': {available} training tasks cannot fill {k} tasks per step")
        wanted = max(k, min(self.candidates, available))
        found: list[str] = []
        index = step * self.candidates
        while len(found) < wanted:
            task_id = task_for(index)
            if task_id not in found:
                found.append(task_id)
            index += 1
        return found

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        """Predicted success probability per row of `features`."""
        with torch.no_grad():
            return torch.sigmoid(self.head(features))

    def choose(self, step: int, candidates: Sequence[str], k: int) -> tuple[list[str], dict[str, float]]:
        """The step's `k` tasks among `candidates` (distinct ids) and stats for the step's metrics row."""
        if len(candidates) < k:
            raise ValueError(f"PromptCurriculum.choose: {len(candidates)} candidates for {k} tasks")
        started = time.perf_counter()
        features = prompt_features(self.model, [self.prompt_ids(t) for t in candidates])
        score_s = time.perf_counter() - started
        predicted = self.predict(features).tolist() if self.buffer else [0.5] * len(candidates)
        rng = random.Random(self.seed * 104_729 + step)
        left = list(range(len(candidates)))
        chosen: list[int] = []
        explored = 0
        for _ in range(k):
            if not self.buffer or rng.random() < self.explore:
                unseen = [i for i in left if candidates[i] not in self.seen]
                pick = rng.choice(unseen or left)
                explored += 1
            else:  # nearest 0.5; ties keep the candidates' order
                pick = min(left, key=lambda i: (abs(predicted[i] - 0.5), i))
            left.remove(pick)
            chosen.append(pick)
        self._pending = {candidates[i]: features[i] for i in chosen}
        self.stats = stats = {
            "pcl_predicted_mean": sum(predicted[i] for i in chosen) / k,
            "pcl_candidate_predicted_mean": sum(predicted) / len(predicted),
            "pcl_explored": float(explored),
            "pcl_score_s": score_s,
        }
        return [candidates[i] for i in chosen], stats

    def observe(self, results: Sequence[tuple[str, list[bool]]]) -> dict[str, float]:
        """Record (task id, episode successes) of the chosen tasks' groups and refit the head."""
        for task_id, successes in results:
            features = self._pending.pop(task_id)
            rate = sum(successes) / len(successes)
            self.buffer.append(Observation(task_id, features, rate, len(successes)))
            self.seen.add(task_id)
        self.buffer = self.buffer[-self.buffer_size :]
        self.stats["pcl_value_loss"] = self.fit()
        return {"pcl_value_loss": self.stats["pcl_value_loss"]}

    def fit(self) -> float:
        """`head_steps` full-batch Adam steps of count-weighted BCE on the buffer; the last step's loss."""
        features = torch.stack([o.features for o in self.buffer])
        targets = torch.tensor([o.success_rate for o in self.buffer])
        weights = torch.tensor([float(o.episodes) for o in self.buffer])
        self.head.fit_standardization(features)
        loss = torch.tensor(0.0)
        for _ in range(self.head_steps):
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.loss(features, targets, weights)
            loss.backward()
            self.optimizer.step()
        return float(self.loss(features, targets, weights).detach())

    def loss(self, features: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Count-weighted BCE of predicted success against observed success rates (soft labels)."""
        each = torch.nn.functional.binary_cross_entropy_with_logits(self.head(features), targets, reduction="none")
        return (each * weights).sum() / weights.sum()

    def state_dict(self) -> dict[str, Any]:
        return {
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "buffer": [(o.task_id, o.features, o.success_rate, o.episodes) for o in self.buffer],
            "seen": sorted(self.seen),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer = [Observation(t, f, float(r), int(n)) for t, f, r, n in state["buffer"]]
        self.seen = set(state["seen"])


def task_prompt_ids(env: Any, tokenizer: Any) -> Callable[[str], list[int]]:
    """A memoized map from task id to the token ids of its first prompt, as rollouts tokenize it."""
    cache: dict[str, list[int]] = {}

    def prompt_ids(task_id: str) -> list[int]:
        if task_id not in cache:
            _, info = env.reset(seed=0, options={"task_id": task_id})
            cache[task_id] = list(TrajectoryTokens(tokenizer, info["messages"], info["tools"]).current.token_ids)
        return cache[task_id]

    return prompt_ids
