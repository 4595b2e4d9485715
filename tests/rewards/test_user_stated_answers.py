"""Answers the user already stated are not creditable (issue 37, part 7): a task whose answer is the user's own fact
pays nothing for echoing it."""

from __future__ import annotations

from typing import Any

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.env import ToolWorldEnv
from envgym.loader import build_environment, load_environment
from envgym.registry import find_env_dir
from envgym.rewards.answers import answers_pass
from envgym.world.spec import Answer, TaskSpec, ToolCall


def _chat(user: str, reply: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]


def test_an_expected_value_the_user_said_is_not_an_answer_unless_a_tool_showed_it() -> None:
    date = [Answer(value="2026-12-14", type="date")]
    echoed = _chat("My visit date is 2026-12-14. When is my visit?", "It is on 2026-12-14.")
    assert not answers_pass(date, echoed)
    assert answers_pass(date, _chat("When is my visit?", "It is on 2026-12-14."))
    looked_up = [*echoed[:1], {"role": "tool", "name": "get_visit", "content": '{"date": "2026-12-14"}'}, echoed[1]]
    assert answers_pass(date, looked_up)


def test_echoing_the_users_fact_scores_zero_on_a_real_env() -> None:
    """A lookup whose answer the user states (like the synthesized air_quality_stations lookup_05b581ea0cce): the
    echo earned 1.0 before; nothing was looked up."""
    data = load_environment(str(find_env_dir("travel")))
    email = next(iter(data.initial.tables["users"].values()))["email"]
    task = TaskSpec(id="lookup_own_email", instruction=f"You want to know the email on your account: {email}.",
                    opening=f"Hi, my email is {email}. Which email is on my account?", user_known={"email": email},
                    solution=[ToolCall(name="find_user_id_by_email", arguments={"email": email})],
                    answers=[Answer(value=email, type="id")], final_reply=f"Your email is {email}.")
    env = ToolWorldEnv(data=build_environment(data.world, [task], data.directory), max_steps=4)
    env.reset(options={"task_id": task.id})
    info = env.step(f"Your email is {email}. ###STOP###")[4]
    assert info["reward_components"]["answers"] == 0.0
