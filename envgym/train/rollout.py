"""Rollouts: groups of episodes through envs with the policy sampler, and the async buffer.

A group's G episodes run in lockstep so each assistant turn is one batched generation; each is the one episode
loop (`envgym.play.episode.EpisodeRun`) with the sampler choosing the actions. Any object with Gymnasium's
`reset`/`step` and the `info` contract of `envgym.env` works (a `gym.make` env, a RemoteEnv).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from envgym.play.episode import EpisodeRun, Trajectory
from envgym.train.tokens import TokenSample, TrajectoryTokens


class Sampler(Protocol):
    """Token ids in, sampled ids and their logprobs out (see `envgym.llm.local.TransformersSampler`)."""

    tokenizer: Any
    eos_token_ids: set[int]

    def sample(
        self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float, seed: int | None = None
    ) -> Sequence[Any]: ...


@dataclass
class TokenTrajectory(Trajectory):
    """A trajectory with what the trainer learns from: its token samples, the tokens sampled, how often the
    sampler's tokens were not the chat template's tokenization but decoded to its text (joined), how often
    not even that (a new sample; see `TrajectoryTokens`), and how many turns the sampler could not confirm were
    sampled as returned (kept as context with mask 0; see `envgym.train.server_sampler`)."""

    samples: list[TokenSample] = field(default_factory=list)
    sampled_tokens: int = 0
    unverified_turns: int = 0
    prefix_mismatches: int = 0
    noncanonical_joins: int = 0


@dataclass
class Group:
    """The G episodes of one task, sampled by the policy at `policy_version`."""

    task_id: str
    episodes: list[TokenTrajectory]
    policy_version: int
    rewards: list[float] = field(default_factory=list)


@dataclass
class RolloutLimits:
    """Per-turn and total token caps and the turn cap of an episode."""

    max_new_tokens: int
    max_sequence_tokens: int
    max_turns: int


def run_group(
    envs: Sequence[Any],
    task_ids: Sequence[str],
    sampler: Sampler,
    limits: RolloutLimits,
    *,
    temperature: float,
    seed: int,
    policy_version: int = 0,
    episode_seeds: Sequence[int] | None = None,
) -> list[TokenTrajectory]:
    """Run one episode per env (env i on task_ids[i], reset with `episode_seeds[i]`, default `seed + i`) in
    lockstep and return them in order; turn t of every episode is one sampler call seeded `seed * 1009 + t`.
    Every token sample is stamped with `policy_version`, the version of the weights `sampler` holds.

    An episode ends when the env terminates or truncates, after `max_turns` turns, or when its sample
    has no room left under `max_sequence_tokens`; the last two count as truncated with reward 0 (the env
    never graded them). Each turn's completion is cut to the room left in its sample, and a sample ends at
    its last sampled token, so none is longer than `max_sequence_tokens`.
    """
    if len(envs) != len(task_ids):
        raise ValueError(f"run_group: {len(envs)} envs but {len(task_ids)} task ids")
    seeds = list(episode_seeds) if episode_seeds is not None else [seed + i for i in range(len(envs))]
    if len(seeds) != len(envs):
        raise ValueError(f"run_group: {len(envs)} envs but {len(seeds)} episode seeds")
    tokenizer = sampler.tokenizer
    # A sampler with sessions (envgym.train.generation) reuses each episode's keys and values across turns.
    turn_sampler = sampler.session() if hasattr(sampler, "session") else sampler
    runs = [EpisodeRun(env, seed=episode_seed, options={"task_id": task_id}, record=TokenTrajectory)
            for env, task_id, episode_seed in zip(envs, task_ids, seeds, strict=True)]
    episodes = [cast(TokenTrajectory, run.trajectory) for run in runs]
    tokens = [TrajectoryTokens(tokenizer, run.info["messages"], run.info["tools"]) for run in runs]
    active = list(range(len(envs)))
    for turn in range(limits.max_turns):
        runnable = []
        for i in active:
            if limits.max_sequence_tokens - len(tokens[i].current.token_ids) > 0:
                runnable.append(i)
            else:
                runs[i].stop()
        if not runnable:
            active = []
            break
        samples = turn_sampler.sample(
            [tokens[i].current.token_ids for i in runnable],
            max_new_tokens=limits.max_new_tokens,
            temperature=temperature,
            seed=seed * 1009 + turn,
        )
        still_active = []
        for i, sample in zip(runnable, samples, strict=True):
            room = limits.max_sequence_tokens - len(tokens[i].current.token_ids)
            ids, logprobs = list(sample.token_ids[:room]), list(sample.logprobs[:room])
            text_ids = ids[:-1] if ids and ids[-1] in sampler.eos_token_ids else ids
            text = tokenizer.decode(text_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            verified = getattr(sample, "verified", True)
            tokens[i].add_completion(ids, logprobs, text, trainable=verified)
            episodes[i].sampled_tokens += len(ids)
            episodes[i].unverified_turns += not verified
            answer = runs[i].step(text)
            if not runs[i].done:
                tokens[i].add_messages(answer)
                still_active.append(i)
        active = still_active
    for i in active:
        runs[i].stop()
    for episode, trajectory_tokens in zip(episodes, tokens, strict=True):
        episode.samples = trajectory_tokens.trainable_samples()
        for sample in episode.samples:
            sample.policy_version = policy_version
        episode.messages = trajectory_tokens.messages
        episode.prefix_mismatches = trajectory_tokens.prefix_mismatches
        episode.noncanonical_joins = trajectory_tokens.noncanonical_joins
    return episodes


def run_groups(
    envs: Sequence[Any],
    task_ids: Sequence[str],
    seeds: Sequence[int],
    sampler: Sampler,
    limits: RolloutLimits,
    *,
    temperature: float,
    policy_version: int = 0,
) -> list[Group]:
    """One group per task (`len(envs) // len(task_ids)` episodes each), all episodes in one lockstep batch.

    Group k's episodes reset with `seeds[k] + i`, as `run_group(..., seed=seeds[k])` resets them, so one group
    alone is exactly that call; with several, each turn of all of them is one sampler call (seeded from
    `seeds[0]`): on a 2-core CPU, three groups of 6 sample ~1.45x more tokens a second this way
    (`experiments/lockstep_groups.py`), since a decode step costs much the same for 18 rows as for 6.
    """
    if not task_ids or len(seeds) != len(task_ids) or len(envs) % len(task_ids):
        raise ValueError(f"run_groups: {len(envs)} envs, {len(task_ids)} tasks and {len(seeds)} seeds "
                         "(one seed per task, the same number of envs for each)")
    size = len(envs) // len(task_ids)
    episodes = run_group(
        envs, [task for task in task_ids for _ in range(size)], sampler, limits, temperature=temperature,
        seed=seeds[0], episode_seeds=[group_seed + i for group_seed in seeds for i in range(size)],
        policy_version=policy_version,
    )
    return [Group(task, episodes[k * size : (k + 1) * size], policy_version) for k, task in enumerate(task_ids)]


class GroupBuffer:
    """A bounded buffer of groups between a rollout worker and the learner, with a staleness bound.

    `get(current_version)` returns the next group whose `policy_version >= current_version -
    max_staleness`; older groups are dropped and counted in `dropped`, so none reaches the loss.
    """

    def __init__(self, capacity: int, max_staleness: int) -> None:
        self._queue: queue.Queue[Group | BaseException] = queue.Queue(maxsize=capacity)
        self.max_staleness = max_staleness
        self.dropped = 0

    def put(self, item: Group | BaseException, stop: threading.Event) -> bool:
        """Block until there is room (False if `stop` was set first). An exception is passed to `get`."""
        while not stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def get(self, current_version: int) -> Group:
        """The next fresh-enough group; re-raises an exception the worker put in the buffer."""
        while True:
            item = self._queue.get()
            if isinstance(item, BaseException):
                raise RuntimeError("the rollout worker failed") from item
            if item.policy_version >= current_version - self.max_staleness:
                return item
            self.dropped += 1


class StaleSampleError(ValueError):
    """A sample older than the staleness bound reached the learner."""


def check_staleness(samples: Sequence[TokenSample], version: int, max_staleness: int) -> list[int]:
    """Each sample's staleness (`version` minus the version that sampled it); raises `StaleSampleError` when one
    exceeds `max_staleness` or comes from a version the learner has not reached."""
    staleness = [version - sample.policy_version for sample in samples]
    for index, lag in enumerate(staleness):
        if not 0 <= lag <= max_staleness:
            raise StaleSampleError(
                f"sample {index} of the step was sampled by policy version {samples[index].policy_version}, "
                f"but the learner is at version {version} and accepts versions {version - max_staleness}.."
                f"{version} (max_staleness={max_staleness})"
            )
    return staleness


class RolloutWorker(threading.Thread):
    """Fills a `GroupBuffer` with `make_batch(index, policy_version)` (a group, or a list of groups: one step's)
    until stopped.

    The learner calls `publish(weights, version)` after each update and `finish_step()` after each step; the
    worker loads the newest weights (through `load_weights`) before starting its next batch, and tags its
    groups with that version.

    With `lead=S` the worker starts batch i only once the learner has finished i - S steps (batch i serves the
    learner's i-th step from the worker's start). Its weights are then at most S updates behind those of the
    step that consumes the batch, since a step makes at most one update: S=0 alternates rollout and update,
    S=1 rolls out step k+1 while the learner updates on step k, and nothing is made only to be dropped.
    `lead=None` runs ahead freely, bounded by the buffer alone (the buffer then drops what grew too old).
    """

    def __init__(
        self,
        buffer: GroupBuffer,
        make_batch: Callable[[int, int], Group | list[Group]],
        load_weights: Callable[[Any], None],
        *,
        lead: int | None = None,
    ) -> None:
        super().__init__(name="envgym-rollout-worker", daemon=True)
        if lead is not None and lead < 0:
            raise ValueError(f"RolloutWorker: lead must be >= 0 or None, got {lead}")
        self.buffer = buffer
        self.make_batch = make_batch
        self.load_weights = load_weights
        self.lead = lead
        self.stop_event = threading.Event()
        self._changed = threading.Condition()
        self._pending: tuple[Any, int] | None = None
        self._finished_steps = 0
        self.version = 0

    def publish(self, weights: Any, version: int) -> None:
        """New weights at `version`, loaded before the next batch starts."""
        with self._changed:
            self._pending = (weights, version)
            self._changed.notify_all()

    def finish_step(self) -> None:
        """The learner finished a step (after publishing its update, if it made one)."""
        with self._changed:
            self._finished_steps += 1
            self._changed.notify_all()

    def _wait_for_turn(self, index: int) -> bool:
        """Block until batch `index` may start (False if stopped first); returns with the newest weights loaded."""
        with self._changed:
            while self.lead is not None and self._finished_steps < index - self.lead:
                if self.stop_event.is_set():
                    return False
                self._changed.wait(timeout=0.1)
            pending, self._pending = self._pending, None
        if pending is not None:
            self.load_weights(pending[0])
            self.version = pending[1]
        return not self.stop_event.is_set()

    def run(self) -> None:
        index = 0
        try:
            while self._wait_for_turn(index):
                made = self.make_batch(index, self.version)
                index += 1
                for group in made if isinstance(made, list) else [made]:
                    if not self.buffer.put(group, self.stop_event):
                        return
        except BaseException as error:  # handed to the learner, which re-raises it with context
            self.buffer.put(error, self.stop_event)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=60)
