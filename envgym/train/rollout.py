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


class RolloutWorker(threading.Thread):
    """Fills a `GroupBuffer` with `make_group(index, policy_version)` until stopped.

    The learner calls `publish(weights, version)` after each update; the worker loads the newest
    weights (through `load_weights`) before starting its next group, and tags the group with that version.
    """

    def __init__(
        self,
        buffer: GroupBuffer,
        make_group: Callable[[int, int], Group],
        load_weights: Callable[[Any], None],
    ) -> None:
        super().__init__(name="envgym-rollout-worker", daemon=True)
        self.buffer = buffer
        self.make_group = make_group
        self.load_weights = load_weights
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._pending: tuple[Any, int] | None = None
        self.version = 0

    def publish(self, weights: Any, version: int) -> None:
        with self._lock:
            self._pending = (weights, version)

    def run(self) -> None:
        index = 0
        try:
            while not self.stop_event.is_set():
                with self._lock:
                    pending, self._pending = self._pending, None
                if pending is not None:
                    self.load_weights(pending[0])
                    self.version = pending[1]
                group = self.make_group(index, self.version)
                index += 1
                if not self.buffer.put(group, self.stop_event):
                    return
        except BaseException as error:  # handed to the learner, which re-raises it with context
            self.buffer.put(error, self.stop_event)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=60)
