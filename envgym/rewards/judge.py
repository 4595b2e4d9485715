"""A relative LLM judge: scores a group of trajectories of the same task in one model call.

RULER's design (one call per group, the shared prefix sent once, scores in [0, 1] relative to each other) with
its gaps closed: the reply is validated JSON, trajectory ids must be exactly 1..N and are mapped by id, scores
outside [0, 1] are rejected, a malformed reply is retried once, every failure is counted, a group of identical
trajectories makes no call, and replies are cached on disk so a group scored once is never sent again.

The judge adds signal next to the verifiable rubric; it never replaces it (see `envgym.rewards.combine`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from envgym.llm.base import ChatModel, ChatResponse
from envgym.rewards.judge_prompt import (
    DEFAULT_RUBRIC,
    RETRY_PROMPT,
    JudgeParseError,
    Message,
    ScoreItem,
    TrajectoryScore,
    build_judge_prompt,
    parse_scores,
)

# Bump when the prompt, the reply schema or the cache entry format changes: old cache entries stop matching.
JUDGE_SCHEMA_VERSION = 2  # 2: trajectory text escaped (judge_prompt.escape_text)

@runtime_checkable
class GuidedScoreModel(Protocol):
    """A model that can decode the score JSON under a grammar (see `envgym.rewards.constrained`).

    `chat_scores` must return text of the form `{"scores": [{"trajectory_id": i, "explanation": e, "score":
    s}, ...]}` for i = 1..n_trajectories; the judge still validates it like any other reply.
    """

    name: str

    def chat_scores(self, messages: list[dict[str, Any]], n_trajectories: int) -> ChatResponse: ...


def load_judge_model(spec: str = "local", **kwargs: Any) -> ChatModel:
    """The judge model for a model spec (see `envgym.llm.load_chat_model`).

    `local` / `local:<gguf path>` give the local model with grammar-guided score decoding
    (`envgym.rewards.constrained.GuidedLocalJudge`; SmolLM2-135M-Instruct by default); any other spec, e.g.
    `openai:<model>` with `base_url=` for a vLLM or OpenAI server, gives that chat model, judged free-form.
    """
    kind, _, argument = spec.partition(":")
    if kind == "local":
        from envgym.rewards.constrained import GuidedLocalJudge

        return GuidedLocalJudge.from_gguf(argument or None, **kwargs)
    from envgym.llm import load_chat_model

    return load_chat_model(spec, **kwargs)


@dataclass
class JudgeMetrics:
    """Counters over every group a judge has scored; `as_dict` names them `judge/<counter>` for logging."""

    groups: int = 0
    model_calls: int = 0
    parse_failures: int = 0
    failed_groups: int = 0
    cache_hits: int = 0
    identical_skips: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f"judge/{k}": v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class JudgeResult:
    """The outcome for one group.

    status: `scored` (the model answered), `cached` (read from the disk cache, no call), `identical` (all
    trajectories equal: no call and no scores, since every score would be the same and carry no signal),
    `failed` (no valid reply after the retry; `error` says why). `scores` is in group order, or None.
    """

    status: Literal["scored", "cached", "identical", "failed"]
    scores: list[TrajectoryScore] | None
    error: str | None = None
    model_calls: int = 0

    @property
    def values(self) -> list[float] | None:
        return None if self.scores is None else [s.score for s in self.scores]


@dataclass
class JudgeConfig:
    """Knobs of the relative judge; every default is the documented default."""

    rubric: str | None = None
    """Grading standards used when `score_group` gets no rubric; None means `DEFAULT_RUBRIC`."""
    max_tokens: int = 512
    """Completion budget for a free-form (unguided) reply."""
    temperature: float = 0.0
    seed: int | None = 0
    max_retries: int = 1
    """Extra calls after a reply that does not parse (the error is shown to the model)."""
    cache_dir: Path | None = None
    """Directory of the reply cache; None disables caching."""
    guided: bool = True
    """Use `chat_scores` (grammar-guided decoding) when the model offers it."""


class _CacheEntry(BaseModel):
    schema_version: int
    key: str
    model: str
    scores: list[ScoreItem]


def cache_key(
    model: str, rubric: str, tools: Sequence[dict[str, Any]], trajectories: Sequence[Sequence[Message]]
) -> str:
    """sha256 over (schema version, judge model, rubric, tools, trajectories), canonical JSON."""
    payload = {
        "schema_version": JUDGE_SCHEMA_VERSION,
        "model": model,
        "rubric": rubric,
        "tools": list(tools),
        "trajectories": [list(t) for t in trajectories],
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class JudgeCache:
    """Judge replies on disk, one JSON file per key, written atomically (temp file + rename).

    Only valid replies are stored, so a failed group is retried next time. An unreadable entry counts as a miss.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> list[TrajectoryScore] | None:
        path = self._path(key)
        try:
            entry = _CacheEntry.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            return None
        if entry.key != key or entry.schema_version != JUDGE_SCHEMA_VERSION:
            return None
        return [TrajectoryScore(s.trajectory_id, s.score, s.explanation) for s in entry.scores]

    def put(self, key: str, model: str, scores: Sequence[TrajectoryScore]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = _CacheEntry(
            schema_version=JUDGE_SCHEMA_VERSION,
            key=key,
            model=model,
            scores=[ScoreItem(**asdict(s)) for s in scores],
        )
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(entry.model_dump_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


@dataclass
class RelativeJudge:
    """Scores groups of trajectories of one task with one model call per group (see the module docstring).

    A model error (network, context overflow) propagates; a reply that does not parse is retried
    `config.max_retries` times and then gives a `failed` result, never made-up scores.
    """

    model: ChatModel
    config: JudgeConfig = field(default_factory=JudgeConfig)
    metrics: JudgeMetrics = field(default_factory=JudgeMetrics)

    def __post_init__(self) -> None:
        self._cache = JudgeCache(self.config.cache_dir) if self.config.cache_dir is not None else None
        self._guided = self.config.guided and isinstance(self.model, GuidedScoreModel)
        # Guided and free decoding of one model give different replies: they must not share cache entries.
        self.model_id = f"{self.model.name}+guided" if self._guided else self.model.name

    def score_group(
        self,
        trajectories: Sequence[Sequence[Message]],
        tools: Sequence[dict[str, Any]],
        rubric: str | None = None,
    ) -> JudgeResult:
        """Score `trajectories` (OpenAI-format messages, same task) against `rubric`.

        `rubric` is the task's criteria (see `rubric_text`); None falls back to `config.rubric`, then
        `DEFAULT_RUBRIC`.
        """
        if not trajectories:
            raise ValueError("score_group: the group is empty; expected at least one trajectory")
        self.metrics.groups += 1
        n = len(trajectories)
        if n > 1 and all(t == trajectories[0] for t in trajectories[1:]):
            self.metrics.identical_skips += 1
            return JudgeResult("identical", None)
        standards = rubric or self.config.rubric or DEFAULT_RUBRIC
        key = cache_key(self.model_id, standards, tools, trajectories)
        if self._cache is not None:
            cached = self._cache.get(key)
            if cached is not None and len(cached) == n:
                self.metrics.cache_hits += 1
                return JudgeResult("cached", cached)
        messages = build_judge_prompt(trajectories, tools, standards)
        result = self._ask(messages, n)
        if result.scores is not None and self._cache is not None:
            self._cache.put(key, self.model_id, result.scores)
        return result

    def _call(self, messages: list[Message], n: int) -> str:
        self.metrics.model_calls += 1
        reply: ChatResponse
        if self._guided:
            assert isinstance(self.model, GuidedScoreModel)
            reply = self.model.chat_scores(messages, n)
        else:
            reply = self.model.chat(
                messages,
                max_tokens=self.config.max_tokens,
                temperature=self.config.temperature,
                seed=self.config.seed,
            )
        self.metrics.prompt_tokens += reply.usage.get("prompt_tokens", 0)
        self.metrics.completion_tokens += reply.usage.get("completion_tokens", 0)
        return reply.text

    def _ask(self, messages: list[Message], n: int) -> JudgeResult:
        error = ""
        for attempt in range(self.config.max_retries + 1):
            text = self._call(messages, n)
            try:
                return JudgeResult("scored", parse_scores(text, n), model_calls=attempt + 1)
            except JudgeParseError as exc:
                self.metrics.parse_failures += 1
                error = str(exc)
                messages = [
                    *messages,
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": RETRY_PROMPT.format(reason=error, n=n)},
                ]
        self.metrics.failed_groups += 1
        return JudgeResult("failed", None, error=error, model_calls=self.config.max_retries + 1)
