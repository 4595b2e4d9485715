"""GEPA-style reflective prompt search (and ACE playbooks): propose, test on a minibatch, keep a per-task front.

One iteration: draw a parent from the Pareto front, play it on a minibatch of training tasks, give its failed
episodes to the reflector, build the child its reply describes, play the child on the same minibatch and keep it
(scored on every training task) only when it beats the parent there. Every `merge_every` iterations two front
candidates are merged instead. Held-out tasks, disjoint from the training ones, are played only by the seed and the
final best candidate. Every decision is an event in `OptimizeResult.events` (no wall times: a seed fixes them all).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envgym.env import ToolWorldEnv
from envgym.llm.base import ChatModel
from envgym.optimize.candidates import Candidate, EditError, apply_ops, count_votes, merge_candidates
from envgym.optimize.pareto import choose_parent, mean_score, pareto_front
from envgym.optimize.reflect import Reflection, ReflectionRejected, Reflector
from envgym.play.episode import Trajectory, run_episode
from envgym.play.policies import ChatModelPolicy


class PromptedPolicy:
    """A chat-model policy that sees `system_text` as its system message instead of the environment's."""

    def __init__(self, model: ChatModel, system_text: str, *, max_tokens: int = 256, seed: int | None = None):
        self.system_text = system_text
        self.inner = ChatModelPolicy(model, max_tokens=max_tokens, temperature=0.0, seed=seed)

    @property
    def tokens(self) -> int:
        return self.inner.tokens

    def act(self, obs: str, info: dict[str, Any]) -> str:
        messages = [{"role": "system", "content": self.system_text}, *info["messages"][1:]]
        return self.inner.act(obs, {**info, "messages": messages})


@dataclass
class OptimizeConfig:
    """The search budget and split. Tasks are shuffled by `seed`; the first `train_tasks` are for search, the next
    `heldout_tasks` only for the before/after measurement."""

    train_tasks: int = 4
    heldout_tasks: int = 4
    iterations: int = 3
    minibatch: int = 2
    merge_every: int = 0  # 0: never merge
    playbook: bool = False
    max_failures_shown: int = 2
    seed: int = 0


@dataclass
class OptimizeResult:
    """Everything a run produced: the pool, train scores per task, the front, the best and held-out success."""

    env: str
    config: OptimizeConfig
    train: list[str]
    heldout: list[str]
    candidates: list[Candidate]
    scores: dict[str, dict[str, float]]
    front: list[str]
    best: str
    heldout_before: list[bool]
    heldout_after: list[bool]
    events: list[dict[str, Any]] = field(default_factory=list)

    def candidate(self, candidate_id: str) -> Candidate:
        return next(c for c in self.candidates if c.id == candidate_id)


def split_tasks(task_ids: list[str], train: int, heldout: int, seed: int) -> tuple[list[str], list[str]]:
    """Disjoint (train, held-out) task lists drawn by `seed`; ValueError when the environment has too few tasks."""
    if train < 1 or heldout < 1:
        raise ValueError(f"need at least one training and one held-out task, got {train} and {heldout}")
    if train + heldout > len(task_ids):
        raise ValueError(f"{train} training + {heldout} held-out tasks, but the environment has only "
                         f"{len(task_ids)} tasks")
    order = list(task_ids)
    random.Random(seed).shuffle(order)
    return order[:train], order[train:train + heldout]


class Optimizer:
    """One search over system prompts (or playbooks) for `env`, with `policy_model` acting and `reflector`
    proposing; `on_event` sees each event as it happens (the CLI's progress)."""

    def __init__(self, env: ToolWorldEnv, policy_model: ChatModel, reflector: Reflector, config: OptimizeConfig,
                 *, max_tokens: int = 256, on_event: Callable[[dict[str, Any]], None] | None = None):
        if reflector.playbook != config.playbook:
            raise ValueError("the reflector's mode (playbook or prompt) must match OptimizeConfig.playbook")
        if config.minibatch < 1 or config.minibatch > config.train_tasks:
            raise ValueError(f"minibatch must be between 1 and train_tasks={config.train_tasks}, "
                             f"got {config.minibatch}")
        self.env, self.model, self.reflector, self.config = env, policy_model, reflector, config
        self.max_tokens = max_tokens
        self.on_event = on_event
        self.rng = random.Random(config.seed)
        all_ids = [t.id for t in env.data.tasks]
        self.train, self.heldout = split_tasks(all_ids, config.train_tasks, config.heldout_tasks, config.seed)
        # Paired comparisons: every candidate plays a task under the same episode seed.
        self._episode_seed = {task_id: config.seed * 100_003 + i for i, task_id in enumerate(all_ids)}
        self._played: dict[tuple[str, str], Trajectory] = {}
        self.candidates: list[Candidate] = []
        self.scores: dict[str, dict[str, float]] = {}
        self.events: list[dict[str, Any]] = []
        self._item_ids = 0
        self._proposals = 0  # every proposal gets a fresh id, kept or not: episodes are cached by id

    def _new_id(self) -> str:
        self._proposals += 1
        return f"c{self._proposals}"

    # ------------------------------------------------------------------ playing
    def _event(self, kind: str, **fields: Any) -> None:
        event = {"event": kind, **fields}
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def play(self, candidate: Candidate, task_id: str) -> Trajectory:
        """The candidate's episode on a task (played once: greedy decoding and a fixed seed make it repeat)."""
        key = (candidate.id, task_id)
        if key not in self._played:
            policy = PromptedPolicy(self.model, candidate.system_text(), max_tokens=self.max_tokens,
                                    seed=self._episode_seed[task_id])
            t = run_episode(self.env, policy, seed=self._episode_seed[task_id], options={"task_id": task_id})
            self._played[key] = t
            self._event("episode", candidate=candidate.id, task=task_id, reward=t.reward, success=t.success,
                        steps=t.steps)
        return self._played[key]

    def _add(self, candidate: Candidate) -> None:
        self.candidates.append(candidate)
        self.scores[candidate.id] = {t: self.play(candidate, t).reward for t in self.train}
        self._event("accepted", candidate=candidate.id, origin=candidate.origin, parents=list(candidate.parents),
                    train_mean=mean_score(self.scores, candidate.id, self.train),
                    front=pareto_front(self.scores, self.train))

    # ------------------------------------------------------------------ proposing
    def _child(self, parent: Candidate, reflection: Reflection) -> Candidate:
        new_id = self._new_id()
        if reflection.prompt is not None:
            if reflection.prompt == parent.prompt:
                raise EditError("the new prompt is the parent's prompt unchanged")
            return Candidate(new_id, reflection.prompt, parent.playbook, (parent.id,), "reflection",
                             reflection.critique)
        adds = sum(op.op == "add" for op in reflection.ops)
        ids = [f"p{self._item_ids + i + 1}" for i in range(adds)]
        items = apply_ops(parent.playbook, list(reflection.ops), ids)
        self._item_ids += adds
        items = count_votes(items, list(reflection.helpful), list(reflection.harmful))
        return Candidate(new_id, parent.prompt, items, (parent.id,), "reflection", reflection.critique,
                         reflection.ops)

    def _propose(self, iteration: int, batch: list[str]) -> tuple[Candidate, list[str]] | None:
        """A child to test and the candidates it must beat on the batch, or None (event logged) when there is
        nothing to test."""
        front = pareto_front(self.scores, self.train)
        if self.config.merge_every and (iteration + 1) % self.config.merge_every == 0 and len(front) >= 2:
            a, b = sorted(front, key=lambda c: -mean_score(self.scores, c, self.train))[:2]
            child = merge_candidates(self.candidate(a), self.candidate(b), self._new_id())
            return child, [a, b]
        parent = self.candidate(choose_parent(self.scores, self.train, self.rng))
        failures = [t for t in (self.play(parent, task) for task in batch) if not t.success]
        if not failures:
            self._event("skipped", iteration=iteration, parent=parent.id, reason="no failure on the minibatch")
            return None
        try:
            reflection = self.reflector.reflect(parent, failures[: self.config.max_failures_shown])
            child = self._child(parent, reflection)
        except (ReflectionRejected, EditError) as exc:
            self._event("rejected", iteration=iteration, parent=parent.id, reason=str(exc))
            return None
        self._event("proposed", iteration=iteration, parent=parent.id, candidate=child.id,
                    critique=child.critique, ops=[vars(op) for op in child.ops])
        return child, [parent.id]

    def candidate(self, candidate_id: str) -> Candidate:
        return next(c for c in self.candidates if c.id == candidate_id)

    # ------------------------------------------------------------------ the search
    def run(self, seed_prompt: str) -> OptimizeResult:
        self._add(Candidate("c0", seed_prompt))
        for iteration in range(self.config.iterations):
            batch = self.rng.sample(self.train, self.config.minibatch)
            proposal = self._propose(iteration, batch)
            if proposal is None:
                continue
            child, rivals = proposal
            child_sum = sum(self.play(child, t).reward for t in batch)
            rival_sum = max(sum(self.scores[r][t] for t in batch) for r in rivals)
            if child_sum > rival_sum or (child.origin == "merge" and child_sum >= rival_sum):
                self._add(child)
            else:
                self._event("not_better", iteration=iteration, candidate=child.id, minibatch=batch,
                            child_sum=child_sum, rival_sum=rival_sum)
        front = pareto_front(self.scores, self.train)
        best = max(self.candidates, key=lambda c: mean_score(self.scores, c.id, self.train)).id
        before = [self.play(self.candidates[0], t).success for t in self.heldout]
        after = [self.play(self.candidate(best), t).success for t in self.heldout]
        self._event("done", best=best, front=front, heldout_before=sum(before), heldout_after=sum(after),
                    heldout=len(self.heldout))
        return OptimizeResult(self.env.data.name, self.config, self.train, self.heldout, list(self.candidates),
                              self.scores, front, best, before, after, self.events)
