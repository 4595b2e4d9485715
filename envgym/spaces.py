"""Text spaces for actions and observations, their AsyncVectorEnv shared-memory codec, and the JSON description
of a space that an env server sends and RemoteEnv turns back into the same space."""

from __future__ import annotations

import multiprocessing
import string
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import shared_memory


class UnsupportedSpaceError(ValueError):
    """A space that cannot be described on the wire (only Text, Discrete and Box can)."""


MAX_TEXT = 1 << 18


class TextSpace(spaces.Text):
    """Any string up to `max_length` characters (tool calls and replies are arbitrary unicode).

    `sample()` draws printable ASCII, as `gymnasium.spaces.Text` does; `contains` accepts every string, because an
    agent may write any text and the env must answer it.
    """

    def __init__(self, max_length: int = MAX_TEXT, sample_length: int = 64, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)
        self.sample_length = sample_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, self.sample_length + 1))
        return "".join(self.np_random.choice(list(string.printable), size=length))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


# AsyncVectorEnv passes observations through shared memory; Gymnasium's Text layout keeps only charset characters,
# so TextSpace stores unicode code points instead, ended by -1.
@shared_memory.create_shared_memory.register(TextSpace)
def _create_text_memory(space: TextSpace, n: int = 1, ctx: Any = multiprocessing) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@shared_memory.write_to_shared_memory.register(TextSpace)
def _write_text_memory(space: TextSpace, index: int, value: str, memory: Any) -> None:
    size = space.max_length + 1
    target = np.frombuffer(memory.get_obj(), dtype=np.int32)[index * size : (index + 1) * size]
    codes = np.frombuffer(value[: space.max_length].encode("utf-32-le"), dtype=np.int32)
    target[: len(codes)] = codes
    target[len(codes)] = -1


class _SharedTexts(Sequence[str]):
    """A live view of the texts in shared memory. AsyncVectorEnv reads its buffer once at start-up and deep-copies
    it on every step, so the view decodes on access and a deep copy is a plain tuple of the current texts."""

    def __init__(self, space: TextSpace, memory: Any, n: int):
        self._rows = np.frombuffer(memory.get_obj(), dtype=np.int32).reshape(n, space.max_length + 1)

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._rows[index]
        end = np.flatnonzero(row == -1)
        return row[: end[0] if len(end) else len(row) - 1].tobytes().decode("utf-32-le")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)


@shared_memory.read_from_shared_memory.register(TextSpace)
def _read_text_memory(space: TextSpace, memory: Any, n: int = 1) -> _SharedTexts:
    return _SharedTexts(space, memory, n)


def describe_space(space: gym.Space[Any]) -> dict[str, Any]:
    """A JSON description of a space that `build_space` turns back into the same space."""
    if isinstance(space, gym.spaces.Text):
        return {
            "type": "Text",
            "min_length": space.min_length,
            "max_length": space.max_length,
            "charset": "".join(sorted(space.character_set)),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    raise UnsupportedSpaceError(f"space {space!r}: only Text, Discrete and Box spaces can be described")


def build_space(description: dict[str, Any]) -> gym.Space[Any]:
    """The space that `describe_space` described."""
    kind = description.get("type")
    if kind == "Text":
        # Any string: tool calls and replies are arbitrary unicode (see TextSpace).
        return TextSpace(max_length=description["max_length"])
    if kind == "Discrete":
        return gym.spaces.Discrete(description["n"], start=description["start"])
    if kind == "Box":
        return gym.spaces.Box(
            low=np.array(description["low"], dtype=description["dtype"]),
            high=np.array(description["high"], dtype=description["dtype"]),
            shape=tuple(description["shape"]),
            dtype=description["dtype"],
        )
    raise UnsupportedSpaceError(f"space type {kind!r} is not supported (Text, Discrete, Box)")
