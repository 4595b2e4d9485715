"""Exact answers said to the user (`TaskSpec.answers`), checked so that guessing fails.

Where answers are read: the agent's replies to the user, i.e. the text of its assistant turns outside tool calls.

How values are read, per answer type (the expected value goes through the same reader, so a trick that hides
candidates from the count hides the answer too):

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
T in the replies, U those in the user's messages and C the union of the type's declared choices. Type T passes iff

1. every value of E is in O (each answer was said), and
2. no choice outside E is said, unless the user said it: ``(O & C) - E - U`` is empty, and
3. at most ``SLACK`` (2) other values are offered: ``len(O - E - U - C) <= SLACK``. This does not apply to enum and
   text answers, whose other values cannot be enumerated: declare their `choices` to make guessing fail.

`answers` passes iff every type passes. An honest reply may repeat what the user said and mention a couple of
incidental values of the same type (an item count, the user's id); a reply that lists candidate statuses, prices,
flight numbers or event locations fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from envgym.protocol import strip_tool_calls
from envgym.world.spec import Answer, AnswerType

SLACK = 2

_NUMBER_RE = re.compile(
    r"(?<![\w.,:/#@-])-?(?:\d{1,3}(?:[,_]\d{3})+|\d+)(?:\.\d+)?(?![\w:/@-]|[.,_]\d)"
)
_TIME_RE = re.compile(
    r"(?<![\w:.])(\d{1,2})(?::([0-5]\d))?\s*([ap])\.?\s?m\b\.?|(?<![\w:.])(\d{1,2}):([0-5]\d)(?![\w:])",
    re.IGNORECASE,
)
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
_DATE_RES = (
    re.compile(r"(?<![\w-])(\d{4})-(\d{2})-(\d{2})(?![\w-])"),
    re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?", re.IGNORECASE),
    re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:,?\s+(\d{{4}})\b)?", re.IGNORECASE),
)
_TOKEN_RE = re.compile(r"[\w#@.+-]+")
_SPACE_RE = re.compile(r"\s+")


def replies_to_user(messages: list[dict[str, Any]]) -> list[str]:
    """The agent's replies to the user: each assistant turn's text outside tool calls."""
    return [strip_tool_calls(m.get("content") or "") for m in messages if m.get("role") == "assistant"]


def user_messages(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "user"]


# ---------------------------------------------------------------- readers: text -> normalized values of one type


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").replace("_", ""))
    except InvalidOperation:
        return None


# The rubric reads the whole conversation again after every turn, and a guess-sprayer's replies hold thousands of
# numerals: each distinct numeral and each reply is read once (the caches are bounded, the values immutable).
@lru_cache(maxsize=65536)
def _number(numeral: str) -> str | None:
    value = _decimal(numeral)
    return None if value is None else f"{value.normalize():f}"


@lru_cache(maxsize=65536)
def _cents(numeral: str) -> str | None:
    value = _decimal(numeral)
    return None if value is None else f"{value.quantize(Decimal('0.01'))}"


@lru_cache(maxsize=256)
def _read_numbers(text: str) -> frozenset[str]:
    return frozenset(v for v in map(_number, {m.group() for m in _NUMBER_RE.finditer(text)}) if v is not None)


@lru_cache(maxsize=256)
def _read_money(text: str) -> frozenset[str]:
    return frozenset(v for v in map(_cents, {m.group() for m in _NUMBER_RE.finditer(text)}) if v is not None)


def read_numbers(text: str) -> set[str]:
    return set(_read_numbers(text))


def read_money(text: str) -> set[str]:
    return set(_read_money(text))


def read_times(text: str) -> set[str]:
    found = set()
    for m in _TIME_RE.finditer(text):
        if m.group(4) is not None:
            hour, minute = int(m.group(4)), int(m.group(5))
        else:
            hour, minute = int(m.group(1)), int(m.group(2) or 0)
            if not 1 <= hour <= 12:
                continue
            hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
        if hour < 24:
            found.add(f"{hour:02d}:{minute:02d}")
    return found


def read_dates(text: str) -> set[str]:
    """ISO dates as YYYY-MM-DD; dates written without a year as MM-DD."""
    found = set()
    for m in _DATE_RES[0].finditer(text):
        found.add(f"{m.group(1)}-{m.group(2)}-{m.group(3)}")
    for pattern, month_group, day_group in ((_DATE_RES[1], 1, 2), (_DATE_RES[2], 2, 1)):
        for m in pattern.finditer(text):
            month, day, year = _MONTHS.index(m.group(month_group).lower()[:3]) + 1, int(m.group(day_group)), m.group(3)
            if 1 <= day <= 31:
                found.add(f"{year}-{month:02d}-{day:02d}" if year else f"{month:02d}-{day:02d}")
    return found


@lru_cache(maxsize=65536)
def id_shape(token: str) -> str:
    return re.sub(r"[^\W\d_]+", "a", re.sub(r"\d+", "9", token.lower().lstrip("#")))


@lru_cache(maxsize=256)
def _read_id_tokens(text: str) -> frozenset[str]:
    tokens = (t.rstrip(".-+").lower().lstrip("#") for t in set(_TOKEN_RE.findall(text)))
    return frozenset(t for t in tokens if t)


def _id_tokens(text: str) -> set[str]:
    return set(_read_id_tokens(text))


def normalize_phrase(text: str) -> str:
    return _SPACE_RE.sub(" ", text.lower()).strip()


def _phrase_spans(text: str, phrase: str) -> list[tuple[int, int]]:
    pattern = r"(?<!\w)" + re.escape(phrase) + r"(?!\w)"
    return [m.span() for m in re.finditer(pattern, text)]


def read_phrases(text: str, phrases: Iterable[str]) -> set[str]:
    """The phrases said in `text` (normalized), ignoring a hit that lies inside a longer phrase's hit."""
    text = normalize_phrase(text)
    hits = {p: _phrase_spans(text, p) for p in {normalize_phrase(p) for p in phrases} if p}
    spans = [(s, e, p) for p, found in hits.items() for s, e in found]
    said = set()
    for start, end, phrase in spans:
        inside_longer = any(s <= start and end <= e and (e - s) > (end - start) for s, e, _ in spans)
        if not inside_longer:
            said.add(phrase)
    return said


_READERS: dict[AnswerType, Callable[[str], set[str]]] = {
    "number": read_numbers, "money": read_money, "time": read_times, "date": read_dates,
}


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

    @property
    def ok(self) -> bool:
        return not self.missing and not self.wrong_choices and len(self.extra) <= SLACK_FOR[self.type]


SLACK_FOR: dict[AnswerType, int] = {
    "number": SLACK, "money": SLACK, "id": SLACK, "date": SLACK, "time": SLACK, "enum": 0, "text": 0,
}


def expected_value(answer: Answer) -> str:
    """The normalized value of an answer; a value its type cannot read raises ValueError naming it."""
    if answer.type in ("enum", "text"):
        value = normalize_phrase(answer.value)
        found = {value} if value else set()
    elif answer.type == "id":
        found = _id_tokens(answer.value)
    else:
        found = _READERS[answer.type](answer.value)
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


# Numerals and id tokens never hold a line break, so the values of the joined texts are the union of each text's
# values, and each text's values are cached; times, dates and phrases may span a line break and read the join.
_PER_TEXT: dict[AnswerType, Callable[[str], frozenset[str]]] = {
    "number": _read_numbers, "money": _read_money, "id": _read_id_tokens,
}


def _read(kind: AnswerType, texts: list[str], expected: set[str], choices: set[str]) -> set[str]:
    if kind in _PER_TEXT:
        found = set().union(*map(_PER_TEXT[kind], texts)) if texts else set()
        if kind == "id":
            shapes = {id_shape(v) for v in expected | choices}
            return {t for t in found if id_shape(t) in shapes}
        return found
    text = "\n".join(texts)
    if kind in ("enum", "text"):
        return read_phrases(text, expected | choices)
    found = _READERS[kind](text)
    if kind == "date":  # a date said without its year stands for the expected date with that month and day
        by_day = {v[5:]: v for v in expected}
        found = {by_day.get(v, v) for v in found}
    return found


def check_type(kind: AnswerType, answers: list[Answer], replies: list[str], user: list[str]) -> TypeVerdict:
    """Apply the rule of the module docstring to the answers of one type."""
    expected = {expected_value(a) for a in answers}
    choices = {expected_value(Answer(value=c, type=kind)) if kind not in ("enum", "text") else normalize_phrase(c)
               for a in answers for c in a.choices}
    offered = _read(kind, replies, expected, choices)
    told = _read(kind, user, expected, choices)
    return TypeVerdict(
        type=kind,
        expected=frozenset(expected),
        offered=frozenset(offered),
        missing=frozenset(expected - offered),
        wrong_choices=frozenset((offered & choices) - expected - told),
        extra=frozenset(offered - expected - told - choices),
    )


def check_answers(answers: list[Answer], messages: list[dict[str, Any]]) -> list[TypeVerdict]:
    """One verdict per answer type, in the order the types first appear in `answers`."""
    by_type: dict[AnswerType, list[Answer]] = {}
    for answer in answers:
        by_type.setdefault(answer.type, []).append(answer)
    replies, user = replies_to_user(messages), user_messages(messages)
    return [check_type(kind, group, replies, user) for kind, group in by_type.items()]


def answers_pass(answers: list[Answer], messages: list[dict[str, Any]]) -> bool:
    return all(v.ok for v in check_answers(answers, messages))


def infer_answer(value: str, pool: Iterable[str] = ()) -> Answer:
    """The answer for `value` with the most specific type that reads it as exactly one value, and as choices the
    values of `pool` (the other plausible answers, e.g. the same field of every record) of that type.

    Times ("19:00", "3 pm"), dates ("May 20"), money ("42 dollars", "$14.50"), numbers ("8,240", "26 months"),
    ids (one token that starts with letters and holds digits, or an email) and otherwise text. Generators use it so that an answer's
    type follows its value.
    """
    kind = _infer_type(value)
    choices = sorted({p for p in pool if _infer_type(p) == kind} | {value}) if pool else []
    return Answer(value=value, type=kind, choices=choices)


def _infer_type(value: str) -> AnswerType:
    lowered = value.lower()
    if len(read_times(value)) == 1 and (":" in value or re.search(r"\d\s*[ap]\.?m\b", lowered)):
        return "time"
    if len(read_dates(value)) == 1:
        return "date"
    if len(read_numbers(value)) == 1:
        return "money" if "$" in value or "dollar" in lowered else "number"
    token = value.strip()
    if _TOKEN_RE.fullmatch(token) and ("@" in token or re.fullmatch(r"#?[^\W\d_]+[\w.-]*\d[\w.-]*", token)):
        return "id"
    return "text"
