"""The answer gate of 'env+tools' (`credit_requires_answer`): an episode earns its per-call credit only if its final
reply reports an answer, right or wrong, read from a tool result (`reported_result`, set by the env as
`info["answer_reported"]`). It exists because GRPO runs drifted to asking the user again instead of answering while
asking earned the same credit as a wrong answer (docs/results/train_multiturn.md)."""

from __future__ import annotations

import random
from typing import Any

import gymnasium as gym
import pytest

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.play.episode import EpisodeRun, Trajectory
from envgym.play.policies import OraclePolicy
from envgym.rewards.answers import reported_result
from envgym.rewards.combine import ProgressReward, RewardConfigError, build_reward_source
from envgym.train.config import GRPOConfig
from envgym.users import STOP
from envgym.world.spec import Answer

TOTAL = [Answer(value="159", type="number")]
STATUS = [Answer(value="processing", type="enum", choices=["pending", "processing", "delivered", "cancelled"])]


def chat(final: str, *, results: tuple[str, ...] = ('{"min": {"value": 159, "plan": "WP0029"}}',),
         user: str = "My phone is 555-420-5364 and I have 3 plans.") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    for result in results:
        messages += [{"role": "assistant", "content": '<tool_call>{"name": "lowest", "arguments": {}}</tool_call>'},
                     {"role": "tool", "content": result}]
    return [*messages, {"role": "assistant", "content": final}]


def test_a_reply_stating_a_value_a_tool_returned_reports_an_answer_right_or_wrong() -> None:
    assert reported_result(TOTAL, chat("The lowest liters among your watering plans: 159."))
    # Wrong, but a value the tools showed: the agent answered, and `answers_pass` is what says it is wrong.
    assert reported_result(TOTAL, chat("It is 175 liters.", results=('[{"liters": 175}, {"liters": 159}]',)))


@pytest.mark.parametrize("final", [
    "Could you tell me your watering plan liters?",  # asks again
    "Please tell me your watering plan liters.",  # asks again, without a question mark
    "You have 3 plans.",  # a number, but one the user said
    "The lowest is 982 liters.",  # a number no tool returned
    "the watering plan is WP0029",  # an id, where a number was asked for
    '<tool_call>{"name": "lowest", "arguments": {}}</tool_call>',  # still calling tools
])
def test_a_reply_that_asks_echoes_or_invents_reports_nothing(final: str) -> None:
    assert not reported_result(TOTAL, chat(final))


def test_numbers_inside_a_tool_error_are_no_result() -> None:
    error = '{"error": "the tool call is not valid JSON (Extra data at char 45)"}'
    assert not reported_result(TOTAL, chat("It is 45.", results=(error,)))
    assert reported_result(TOTAL, chat("It is 45.", results=('{"liters": 45}',)))


def test_every_asked_type_must_be_reported() -> None:
    both = [*STATUS, Answer(value="671.93", type="money")]
    result = '{"status": "processing", "total": 671.93}'
    assert reported_result(both, chat("It is processing and cost $671.93.", results=(result,)))
    assert not reported_result(both, chat("It is processing.", results=(result,)))
    with pytest.raises(ValueError, match="asks for no answer"):
        reported_result([], chat("done"))


def play(task: str, turns: int, final: str) -> Trajectory:
    """The oracle's first `turns` turns of a retail task, then `final` as the agent's last message."""
    env = gym.make("envgym/retail-v0", failure_rate=0.0)
    oracle = OraclePolicy()
    run = EpisodeRun(env, seed=0, options={"task_id": task})
    for _ in range(turns):
        run.step(oracle.act(run.obs, run.info))
    while not run.done:
        run.step(f"{final} {STOP}")
    env.close()
    return run.trajectory


def test_the_env_reports_whether_the_final_reply_answered() -> None:
    """A real env: after the oracle's lookups and confirmation, stating the status and total reports an answer; asking for them
    again does not, though both earn the same credited calls and the same verifiable reward."""
    answered = play("status_W0050", 3, "Order #W0050 is processing; its total was 671.93.")
    asked = play("status_W0050", 3, "Could you tell me the status and total you need?")
    assert answered.tool_calls_credited == asked.tool_calls_credited > 0
    assert answered.reward == asked.reward == 0.0  # the address change was never made
    assert (answered.answer_reported, asked.answer_reported) == (True, False)
    assert ProgressReward(0.1).score([answered, asked]) == [0.1 * answered.tool_calls_credited] * 2
    gated = ProgressReward(0.1, requires_answer=True).score([answered, asked])
    assert gated == [pytest.approx(0.1 * answered.tool_calls_credited), 0.0]
    # A task that asks for no answer is not gated (the env sets no answer_reported).
    cancel = play("cancel_W0071", 3, "I cannot finish this.")
    assert cancel.answer_reported is None and cancel.tool_calls_credited > 0
    assert ProgressReward(0.1, requires_answer=True).score([cancel]) == ProgressReward(0.1).score([cancel])


def test_the_gate_only_takes_credit_away() -> None:
    rng = random.Random(0)
    episodes = [Trajectory("e", "t", [], [], reward=rng.choice([0.0, 0.0, 0.5, 1.0]),
                           tool_calls_credited=rng.randrange(6), answer_reported=rng.choice([True, False, None]))
                for _ in range(200)]
    free, gated = ProgressReward(0.1).score(episodes), ProgressReward(0.1, requires_answer=True).score(episodes)
    for g, f, e in zip(gated, free, episodes, strict=True):
        assert g <= f
        # Credit is withheld exactly where the episode did not answer; what is left is the verifiable reward.
        assert g == (e.reward if e.answer_reported is False else f)
    assert sum(g < f for g, f in zip(gated, free, strict=True)) == sum(
        1 for e in episodes if e.answer_reported is False and e.tool_calls_credited > 0)


def test_the_knob_is_for_env_tools_only() -> None:
    assert build_reward_source("env+tools", credit_requires_answer=True).requires_answer  # type: ignore[attr-defined]
    with pytest.raises(RewardConfigError, match="env\\+tools' only"):
        build_reward_source("env", credit_requires_answer=True)
    with pytest.raises(ValueError, match="credit_requires_answer"):
        GRPOConfig(reward="env", credit_requires_answer=True)
    assert GRPOConfig(reward="env+tools", credit_requires_answer=True).credit_requires_answer
