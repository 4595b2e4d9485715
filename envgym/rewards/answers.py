"""Exact answers said to the user (`TaskSpec.answers`), checked so that guessing and hedging fail.

Where answers are read: the agent's final reply to the user, i.e. the text outside tool calls of its last assistant
turn that has any (`final_reply`). An answer said earlier and not in the final reply does not count, and neither
does a list of candidates sprayed over earlier turns: the final reply is where the agent commits to one value per
asked fact.

How values are read, per answer type (by the readers of `envgym.world.values`; the expected value goes through
the same reader, so a trick that hides candidates from the count hides the answer too):

- ``number``: decimal numerals; "," and "_" between digit groups are ignored; compared by value ("1,280" ==
  "1280.0"). Digits inside an id, a date, a time or a phone number ("W0071", "2026-12-14", "06:10", "555-0199") are
  not numbers.
- ``money``: the same numerals compared to the cent ("412.5" == "$412.50" == "412.50 dollars").
- ``id``: tokens of letters, digits and ``#@._+-`` whose shape (digit runs -> 9, letter runs -> a, a leading "#"
  dropped) is the shape of an expected id: "#W0071", "HAT012", "R0007" are all "a9", an email "a.a@a.a";
  compared without regard to case.
- ``date``: "2026-12-14", "December 14, 2026", "14 Dec 2026", "Dec 14"; a date without a year stands for the
  expected date with the same month and day.
- ``time``: "06:10", "6:10 am", "6:10 PM", "3 pm", read on a 24-hour clock.
- ``enum`` and ``text``: the expected value and the declared choices as whole phrases, case-insensitive, whitespace
  collapsed; a phrase found only inside a longer choice that was also found does not count.

The rule. Answers are grouped by type; for each type T let E be its expected values, O the distinct values of type
T in the final reply, U those in the user's messages and C the union of the type's declared choices. Type T passes
iff

1. every value of E is in O (each answer was said), and
2. no choice outside E is said, unless the user said it: ``(O & C) - E - U`` is empty, and
3. no other value of the type is offered: ``len(O - E - U - C)`` is at most the sum of the answers'
   `extra_values`, which is 0 unless the task declares it with an `extra_reason`. So "671.93, or maybe 47.17, or
   464.14" fails a money answer: one value per asked fact.

4. no expected value was said by the user unless a tool result showed it too: ``(E & U) - R`` is empty, R the
   values of type T in the episode's tool results. A fact the user gave (in the request or in answer to a question)
   is no answer the agent found: echoing it pays nothing; an agent that looked it up may report it.

`answers` passes iff every type passes. An honest final reply may repeat what the user said; a reply that hedges
between candidate statuses, prices, flight numbers or event locations fails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from envgym.protocol import strip_tool_calls
from envgym.world.spec import Answer, AnswerType
from envgym.world.values import (
    LINE_READERS,
    READERS,
    id_shape,
    infer_answer,
    normalize_phrase,
    read_dates,
    read_id_tokens,
    read_money,
    read_numbers,
    read_phrases,
    read_times,
)

# Readers and `infer_answer` live in envgym.world.values (generators use them too); named here for the rubric's users.
__all__ = ["TypeVerdict", "answers_pass", "check_answers", "check_task_answers", "expected_value", "final_reply",
           "infer_answer", "read_dates", "read_money", "read_numbers", "read_times", "replies_to_user",
           "reported_result", "user_messages"]


def replies_to_user(messages: list[dict[str, Any]]) -> list[str]:
    """The agent's replies to the user: each assistant turn's text outside tool calls."""
    return [strip_tool_calls(m.get("content") or "") for m in messages if m.get("role") == "assistant"]


def final_reply(messages: list[dict[str, Any]]) -> str:
    """The agent's last reply to the user: the last assistant turn's text outside tool calls that is not blank
    ('' when there is none)."""
    return next((text for text in reversed(replies_to_user(messages)) if text.strip()), "")


def user_messages(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "user"]


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]


# ---------------------------------------------------------------- the check


@dataclass(frozen=True)
class TypeVerdict:
    """The check of one answer type: what was expected, offered, missing and offered beyond the answer."""

    type: AnswerType
    expected: frozenset[str]
    offered: frozenset[str]
    missing: frozenset[str]
    wrong_choices: frozenset[str]
    extra: frozenset[str]
    allowed_extra: int = 0  # the answers' declared `extra_values`
    stated: frozenset[str] = frozenset()  # expected values the user said: saying them back shows nothing

    @property
    def ok(self) -> bool:
        return (not self.missing and not self.stated and not self.wrong_choices
                and len(self.extra) <= self.allowed_extra)


def expected_value(answer: Answer) -> str:
    """The normalized value of an answer; a value its type cannot read raises ValueError naming it."""
    if answer.type in ("enum", "text"):
        value = normalize_phrase(answer.value)
        found = {value} if value else set()
    elif answer.type == "id":
        found = read_id_tokens(answer.value)
    else:
        found = READERS[answer.type](answer.value)
    if len(found) != 1:
        raise ValueError(f"answer {answer.value!r} of type {answer.type} does not hold exactly one {answer.type} value")
    return next(iter(found))


def check_task_answers(task_id: str, answers: list[Answer]) -> None:
    """Raise ValueError naming the task and the answer if a value or a choice cannot be read as its type."""
    for i, answer in enumerate(answers):
        for value in [answer.value, *answer.choices]:
            try:
                expected_value(Answer(value=value, type=answer.type, choices=answer.choices))
            except ValueError as exc:
                raise ValueError(f"task {task_id}: answers[{i}]: {exc}") from exc


def _read(kind: AnswerType, texts: list[str], expected: set[str], choices: set[str]) -> set[str]:
    if kind in LINE_READERS:
        found = set().union(*map(LINE_READERS[kind], texts)) if texts else set()
        if kind == "id":
            shapes = {id_shape(v) for v in expected | choices}
            return {t for t in found if id_shape(t) in shapes}
        return found
    text = "\n".join(texts)
    if kind in ("enum", "text"):
        return read_phrases(text, expected | choices)
    found = READERS[kind](text)
    if kind == "date":  # a date said without its year stands for the expected date with that month and day
        by_day = {v[5:]: v for v in expected}
        found = {by_day.get(v, v) for v in found}
    return found


def check_type(kind: AnswerType, answers: list[Answer], replies: list[str], user: list[str],
               results: list[str] | None = None) -> TypeVerdict:
    """Apply the rule of the module docstring to the answers of one type."""
    expected, choices = _expected_and_choices(kind, answers)
    offered = _read(kind, replies, expected, choices)
    told = _read(kind, user, expected, choices)
    return TypeVerdict(
        type=kind,
        expected=frozenset(expected),
        offered=frozenset(offered),
        missing=frozenset(expected - offered),
        wrong_choices=frozenset((offered & choices) - expected - told),
        extra=frozenset(offered - expected - told - choices),
        allowed_extra=sum(a.extra_values for a in answers),
        stated=frozenset((expected & told) - (_read(kind, results, expected, choices) if results else set())),
    )


def check_answers(answers: list[Answer], messages: list[dict[str, Any]]) -> list[TypeVerdict]:
    """One verdict per answer type, in the order the types first appear in `answers`, read from the final reply."""
    replies, user = [final_reply(messages)], user_messages(messages)
    return [check_type(kind, group, replies, user, tool_results(messages)) for kind, group in _by_type(answers)]


def answers_pass(answers: list[Answer], messages: list[dict[str, Any]]) -> bool:
    return all(v.ok for v in check_answers(answers, messages))


def reported_result(answers: list[Answer], messages: list[dict[str, Any]]) -> bool:
    """Whether the final reply commits to an answer, right or wrong: for every answer type the task asks for, it
    states a value of that type that one of the episode's tool results showed and the user never said. A reply
    that asks again ("Could you tell me your watering plan?"), echoes what the user gave or names a value no tool
    returned reports nothing. Training uses it to pay shaping credit only to episodes that answer
    (`envgym.rewards.combine.ProgressReward`); `answers_pass` decides whether the answer is right."""
    if not answers:
        raise ValueError("reported_result: the task asks for no answer")
    reply, user = [final_reply(messages)], user_messages(messages)
    results = [text for text in tool_results(messages) if not _is_error(text)]
    for kind, group in _by_type(answers):
        expected, choices = _expected_and_choices(kind, group)
        shown = _read(kind, results, expected, choices) - _read(kind, user, expected, choices)
        if not _read(kind, reply, expected, choices) & shown:
            return False
    return True


def _is_error(result: str) -> bool:
    """Whether a tool result is an error object (`{"error": ...}`): the numbers in its message are no result."""
    if not result.startswith('{"error"'):
        return False
    try:
        return isinstance(json.loads(result), dict)
    except ValueError:
        return False


def _by_type(answers: list[Answer]) -> list[tuple[AnswerType, list[Answer]]]:
    """The answers grouped by type, types in the order they first appear."""
    by_type: dict[AnswerType, list[Answer]] = {}
    for answer in answers:
        by_type.setdefault(answer.type, []).append(answer)
    return list(by_type.items())


def _expected_and_choices(kind: AnswerType, answers: list[Answer]) -> tuple[set[str], set[str]]:
    """The normalized expected values of `answers` (all of type `kind`) and of their declared choices."""
    expected = {expected_value(a) for a in answers}
    choices = {expected_value(Answer(value=c, type=kind)) if kind not in ("enum", "text") else normalize_phrase(c)
               for a in answers for c in a.choices}
    return expected, choices
