"""Resets per second of retail-v0 with copy-on-write state, next to the same reset with the world deep-copied.

Old style: the initial world's tables deep-copied on every reset (what WorldState.copy did before copy-on-write),
through the same env.reset; also every record copied by the JSON-aware copier (`copy_record`). Also timed: reset plus one episode's first reads and a write, so the cost moved from
reset to first access is shown too. Goal: reset >= 5x faster. Run: python benchmarks/reset.py [--seconds S]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from collections.abc import Callable

import gymnasium as gym
from env_step import rates  # benchmarks/ is the script directory, so its helpers import by name

import envgym  # noqa: F401  (registers the environments)
from envgym.env import ToolWorldEnv
from envgym.world.state import WorldState, copy_record

READ = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0071"}}</tool_call>'
WRITE = ('<tool_call>{"name": "cancel_pending_order", "arguments": {"order_id": "#W0071", '
         '"reason": "ordered by mistake"}}</tool_call>')


class DeepCopiedWorld(WorldState):
    """The world as reset copied it before copy-on-write: every table and record deep-copied."""

    def copy(self) -> WorldState:
        return WorldState(copy.deepcopy(self.plain()))


class FastCopiedWorld(WorldState):
    """Every record copied by the JSON-aware copier (the step between deepcopy and copy-on-write)."""

    def copy(self) -> WorldState:
        return WorldState(copy_record(self.plain()))


def make(world: type[WorldState] | None = None) -> ToolWorldEnv:
    env: ToolWorldEnv = gym.make("envgym/retail-v0", task="cancel_W0071", max_steps=10**9).unwrapped
    if world is not None:
        env.data = dataclasses.replace(env.data, initial=world(env.data.initial.plain()))
    env.reset(seed=0)
    return env


def episode(env: ToolWorldEnv) -> Callable[[], None]:
    def run() -> None:
        env.reset(seed=0)
        env.step(READ)
        env.step(WRITE)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    old, fast, new = make(DeepCopiedWorld), make(FastCopiedWorld), make()
    old_reset, new_reset = rates(lambda: old.reset(seed=0), lambda: new.reset(seed=0), args.seconds)
    fast_reset, new_reset2 = rates(lambda: fast.reset(seed=0), lambda: new.reset(seed=0), args.seconds)
    old_episode, new_episode = rates(episode(old), episode(new), args.seconds)
    old_copy, new_copy = rates(old.data.initial.copy, new.data.initial.copy, args.seconds)
    print(json.dumps({
        "deepcopy_resets_per_s": round(old_reset), "cow_resets_per_s": round(new_reset),
        "reset_speedup": round(new_reset / old_reset, 2),
        "fast_copy_resets_per_s": round(fast_reset), "reset_speedup_over_fast_copy": round(new_reset2 / fast_reset, 2),
        "deepcopy_state_copies_per_s": round(old_copy), "cow_state_copies_per_s": round(new_copy),
        "state_copy_speedup": round(new_copy / old_copy, 1),
        "deepcopy_reset_read_write_per_s": round(old_episode), "cow_reset_read_write_per_s": round(new_episode),
        "reset_read_write_speedup": round(new_episode / old_episode, 2),
        "goal": "reset_speedup >= 5",
    }))


if __name__ == "__main__":
    main()
