"""Exact answers: read per type from the agent's replies; the honest answer passes, guess-sprays fail."""

from __future__ import annotations

from typing import Any

import pytest

from envgym.loader import build_environment
from envgym.rewards.answers import (
    answers_pass,
    check_answers,
    expected_value,
    final_reply,
    infer_answer,
    read_dates,
    read_money,
    read_numbers,
    read_times,
    replies_to_user,
)
from envgym.world.spec import Answer, SpecError, TaskSpec, WorldSpec

STATUSES = ["pending", "processing", "delivered", "cancelled"]


def chat(*replies: str, user: str = "What is the status and total of my order #W0012?") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Policy: pending or delivered orders."},
                                      {"role": "user", "content": user}]
    for reply in replies:
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "ok"}]
    return messages


def test_numbers_are_read_by_value_and_not_from_ids_dates_times_or_phones() -> None:
    assert read_numbers("It costs 1,280 or 1280.0, ok? Also -3 and 7.") == {"1280", "-3", "7"}
    assert read_numbers("#W0071 HAT012 on 2026-12-14 at 06:10, call 555-0199, 600k") == set()


def test_money_is_compared_to_the_cent() -> None:
    assert read_money("$412.50") == read_money("412.5 dollars") == {"412.50"}


def test_times_read_on_a_24_hour_clock() -> None:
    assert read_times("06:10, 6:10 pm, 3 pm, 12 am and 12:30 p.m.") == {"06:10", "18:10", "15:00", "00:00", "12:30"}


def test_dates_with_and_without_a_year() -> None:
    assert read_dates("2026-12-14, December 14, 2026, 3rd of May and May 20") == {"2026-12-14", "05-03", "05-20"}


def test_honest_status_and_total_pass() -> None:
    answers = [Answer(value="delivered", type="enum", choices=STATUSES), Answer(value="412.5", type="money")]
    assert answers_pass(answers, chat("Order #W0012 is Delivered; its total was $412.50."))


def test_a_missing_or_wrong_answer_fails() -> None:
    answers = [Answer(value="delivered", type="enum", choices=STATUSES), Answer(value="412.5", type="money")]
    assert not answers_pass(answers, chat("Order #W0012 is delivered."))
    assert not answers_pass(answers, chat("Order #W0012 is delivered; its total was $412.05."))


def test_naming_another_enum_value_is_a_guess() -> None:
    answers = [Answer(value="delivered", type="enum", choices=STATUSES)]
    assert not answers_pass(answers, chat("It is delivered or processing."))
    assert not answers_pass(answers, chat("It is one of: " + ", ".join(STATUSES)))


def test_a_value_the_user_said_may_be_repeated() -> None:
    answers = [Answer(value="delivered", type="enum", choices=STATUSES)]
    assert answers_pass(answers, chat("No, it is not pending: it is delivered.", user="Is order #W0012 pending?"))


def test_a_hedge_fails_unless_the_task_declares_extra_values_with_a_reason() -> None:
    answers = [Answer(value="412.5", type="money")]
    assert answers_pass(answers, chat("Your total was 412.50."))
    assert not answers_pass(answers, chat("Your total was 412.50, or maybe 39.99."))
    assert not answers_pass(answers, chat("item 1, total 412.50"))  # no incidental number either
    declared = [Answer(value="412.5", type="money", extra_values=2, extra_reason="the reply lists two item prices")]
    assert answers_pass(declared, chat("items 19.99 and 392.51, total 412.50"))
    assert not answers_pass(declared, chat("items 19.99, 2.00 and 390.51, total 412.50"))
    spray = ", ".join(f"{cents / 100:.2f}" for cents in range(1000, 90001, 7)) + ", 412.50"
    verdict = check_answers(answers, chat(spray))[0]
    assert not verdict.ok and not verdict.missing and len(verdict.extra) > 10_000
    with pytest.raises(ValueError, match="without an extra_reason"):
        Answer(value="412.5", type="money", extra_values=1)


def test_only_the_final_reply_counts() -> None:
    answers = [Answer(value="412.5", type="money")]
    assert not answers_pass(answers, chat("It was 412.50.", "Anything else I can do?"))
    assert answers_pass(answers, chat("Maybe 39.99, maybe 12.00.", "Your total was 412.50."))
    assert final_reply(chat("first", '<tool_call>{"name": "x", "arguments": {}}</tool_call>')) == "first"


def test_the_numbers_in_the_users_question_do_not_count_as_guesses() -> None:
    answers = [Answer(value="29051123", type="number")]
    assert answers_pass(answers, chat("4867 * 5969 = 29,051,123", user="What is 4867 * 5969?"))
    assert not answers_pass(answers, chat(", ".join(str(n) for n in range(1001)) + " or 29051123"))


def test_ids_are_matched_by_shape_and_case_insensitively() -> None:
    answers = [Answer(value="HAT012", type="id")]
    assert answers_pass(answers, chat("Reservation R0007 is on flight hat012.", user="About R0007?"))
    assert not answers_pass(answers, chat("It is HAT001, HAT002, HAT003 or HAT012."))


def test_time_choices_leave_no_room_for_a_second_guess() -> None:
    answers = [Answer(value="06:10", type="time", choices=["06:10", "08:45", "11:30"])]
    assert answers_pass(answers, chat("It leaves at 6:10 am."))
    assert not answers_pass(answers, chat("It leaves at 6:10 or 8:45."))


def test_text_choices_count_whole_phrases_only() -> None:
    choices = ["Room 4B", "Cedar room", "Zoom", "Zoom lobby"]
    answers = [Answer(value="Zoom", choices=choices)]
    assert answers_pass(answers, chat("It is on zoom; the Cedar roomy chairs are elsewhere."))
    assert not answers_pass(answers, chat("It is in the Zoom lobby."))
    assert not answers_pass(answers, chat("It is on Zoom, or in Room 4B."))


def test_text_without_choices_only_needs_the_phrase() -> None:
    assert answers_pass([Answer(value="hall C")], chat("The conference is in Hall  C."))


def test_only_replies_to_the_user_count_not_tool_call_arguments() -> None:
    messages = chat('<tool_call>{"name": "x", "arguments": {"q": "delivered"}}</tool_call>')
    assert replies_to_user(messages) == [""]
    assert not answers_pass([Answer(value="delivered", type="enum", choices=STATUSES)], messages)


def test_a_task_with_an_unreadable_answer_fails_to_load_naming_it(shop_world: WorldSpec) -> None:
    task = TaskSpec(id="bad", instruction="i", opening="o",
                    answers=[Answer(value="12:30", type="time", choices=["12:30", "noon"])])
    with pytest.raises(SpecError, match=r"task bad: answers\[0\]: answer 'noon' of type time"):
        build_environment(shop_world, [task])


def test_an_answer_its_type_cannot_read_is_an_error() -> None:
    with pytest.raises(ValueError, match="'soon' of type number"):
        expected_value(Answer(value="soon", type="number"))
    with pytest.raises(ValueError, match="needs its choices"):
        Answer(value="x", type="enum")


@pytest.mark.parametrize(("value", "kind"), [
    ("19:00", "time"), ("3 pm", "time"), ("May 20", "date"), ("42 dollars", "money"), ("8,240", "number"),
    ("26 months", "number"), ("HAT012", "id"), ("emma@example.com", "id"), ("600k", "text"), ("7 of 9", "text"),
])
def test_infer_answer_picks_the_type_that_reads_the_value(value: str, kind: str) -> None:
    assert infer_answer(value).type == kind


def test_infer_answer_keeps_choices_of_the_same_type() -> None:
    answer = infer_answer("26 months", ["8,240", "Priya", "26 months", "12"])
    assert answer.choices == ["12", "26 months", "8,240"]


def test_numbers_money_and_ids_read_per_line_are_those_of_the_joined_text() -> None:
    lines = ["Total 1,280.50 for #W0071", "12\n", ",000 and 7.", "W0072.", "-3", "$4.5 on 2026-12-14 at 06:10"]
    answers = [Answer(value="1280.50", type="money"), Answer(value="12", type="number"),
               Answer(value="#W0071", type="id")]
    joined = "\n".join(lines)
    offered = {v.type: set(v.offered) for v in check_answers(answers, chat(joined))}
    assert offered["money"] == read_money(joined) and offered["number"] == read_numbers(joined)
    assert offered["id"] == {"w0071", "w0072"}
