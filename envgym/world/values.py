"""Typed values in text: how numbers, money, times, dates, ids and phrases are read from what someone wrote
(each reader returns the normalized values it found), and the type a value has (`infer_answer`).

The rubric's answers check (`envgym.rewards.answers`) reads the agent's replies with these readers; generators type
the answers of their tasks with `infer_answer`, so an answer's type follows its value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from envgym.world.spec import Answer, AnswerType

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


def read_id_tokens(text: str) -> set[str]:
    """Tokens of letters, digits and #@._+- (lower case, a leading # dropped): the candidates for ids."""
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


READERS: dict[AnswerType, Callable[[str], set[str]]] = {
    "number": read_numbers, "money": read_money, "time": read_times, "date": read_dates,
}
# Numerals and id tokens never hold a line break, so the values of texts joined by line breaks are the union of
# each text's values: these readers are cached per text (times, dates and phrases may span a line break).
LINE_READERS: dict[AnswerType, Callable[[str], frozenset[str]]] = {
    "number": _read_numbers, "money": _read_money, "id": _read_id_tokens,
}


def infer_answer(value: str, pool: Iterable[str] = ()) -> Answer:
    """The answer for `value` with the most specific type that reads it as exactly one value, and as choices the
    values of `pool` (the other plausible answers, e.g. the same field of every record) of that type.

    Times ("19:00", "3 pm"), dates ("May 20"), money ("42 dollars", "$14.50"), numbers ("8,240", "26 months"),
    ids (one token that starts with letters and holds digits, or an email) and otherwise text. Generators use it so
    that an answer's type follows its value.
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
