"""Hedged answers on the bundled tasks (issue 37, part 2): the right value plus two others of the asked type fails."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.play.episode import EpisodeRun
from envgym.play.scripted import scripted_turns


def _finish(env_name: str, task_id: str, *replies: str) -> dict[str, float]:
    """The oracle's turns up to its closing reply, then `replies` instead of it."""
    env = gym.make(f"envgym/{env_name}-v0", failure_rate=0.0)
    data = env.unwrapped.data
    turns = scripted_turns(data.world, data.task(task_id))[:-1]
    run = EpisodeRun(env, seed=0, options={"task_id": task_id})
    for action in [*turns, *replies, "Goodbye. ###STOP###"]:
        if run.done:
            break
        run.step(action)
    return run.trajectory.reward_components


HONEST = {
    ("retail", "status_W0050"): "Order #W0050 is processing; its total was 671.93. Its shipping address is now your "
                                "default address.",
    ("travel", "status_R0043"): "Reservation R0043 is on HAT011, departing 14:05; it is cancelled.",
}
HEDGED = {
    ("retail", "status_W0050"): "Order #W0050 is processing; its total was 671.93, or maybe 47.17, or 464.14.",
    # The example was status_R0028 ("HAT051, or maybe HAT000 or HAT001"), regenerated away with part 5.
    ("travel", "status_R0043"): "Reservation R0043 is on HAT011, or maybe HAT000 or HAT001, departing 14:05; it is "
                                "cancelled.",
}


@pytest.mark.parametrize("key", sorted(HEDGED))
def test_the_right_value_plus_two_others_fails(key: tuple[str, str]) -> None:
    assert _finish(*key, HONEST[key])["answers"] == 1.0
    assert _finish(*key, HEDGED[key])["answers"] == 0.0  # 1.0 before: two extra values of the type were free
