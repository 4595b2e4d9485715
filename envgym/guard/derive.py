"""Values the user chose without typing them: records the user named, and numbers computed from values they gave.

Three ways a request fixes a value it does not spell out, each bounded so that untrusted text alone cannot fix it:

- **Named records.** A record the user names by one of its name fields (an event's title, an email's subject, a
  transaction's amount) lends the guard the fields the platform writes on it (its participants, sender, id): the
  user pointed at the record, and no third party writes those fields into someone else's record.
- **Targets by description.** A write's target may be named by a run of its name's words ("the grocery list" for
  grocery-list-today.docx, if no other record's name holds that run as large a share) or by a superlative over a
  platform field ("the largest file": the record with the largest size).
- **Computation.** An amount may be a small arithmetic expression (two operations at most) over numbers the user
  typed, trusted records hold or a source the user pointed at says, with at least one operand that is not only a
  trusted record's: a refund difference, a VAT top-up, a rent increase. Only when the request or that source speaks
  of a computation (`asks_to_compute`: "difference", "increased by", "19.5%", "split"): two operations over a
  dozen numbers reach most small amounts, so without that word an amount is one the user or the source wrote.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from envgym.guard.text import normalize, spans

_NUMBER = re.compile(r"(?<![\w.-])(\d+(?:[.,]\d+)?)(\s?%)?(?![\w-])")
_WORD = re.compile(r"[a-z0-9]+")
# Words by which a text asks for (or states) an arithmetic change of an amount; "%" too.
_COMPUTE = re.compile(r"%|\b(?:difference|differ|increase[ds]?|decrease[ds]?|reduced?|raised?|rise[ns]?|additional|"
                      r"added|extra|plus|minus|fees?|share|split|half|double|twice|triple|times|total|sum|remaining|"
                      r"percent(?:age)?|divided?|multiplied|more|less|discount(?:ed)?|tax|vat|interest|subtract(?:ed)?|"
                      r"deduct(?:ed)?|combined|average|instead of)\b")


def numbers_in(text: str) -> list[float]:
    """The numbers written in `text` ("19.5%" is 0.195 and 19.5; dates and codes with hyphens are not numbers)."""
    found: list[float] = []
    for digits, percent in _NUMBER.findall(text):
        value = float(digits.replace(",", "."))
        found.append(value)
        if percent:
            found.append(value / 100)
    return found


def asks_to_compute(text: str) -> bool:
    """Whether `text` (normalized) speaks of computing an amount (`_COMPUTE`: "the difference", "increased by",
    "an additional 19.5%", "our share")."""
    return bool(_COMPUTE.search(text))


def _cents(value: float) -> int:
    return round(value * 100)


def _apply(a: float, b: float) -> Iterator[float]:
    yield a + b
    yield a - b
    yield b - a
    yield a * b
    if b:
        yield a / b
    if a:
        yield b / a


def computed(value: float, anchored: Iterable[float], trusted: Iterable[float]) -> bool:
    """Whether `value` is an operand or a one- or two-operation expression over `anchored` (numbers the user typed
    or a source the user pointed at says) and `trusted` (trusted records), using at least one anchored operand;
    compared to the cent."""
    pool = [(n, True) for n in dict.fromkeys(anchored)]
    pool += [(n, False) for n in dict.fromkeys(trusted)]
    target = _cents(value)
    if any(anchor and _cents(n) == target for n, anchor in pool):
        return True
    pairs: dict[int, list[tuple[float, bool]]] = {}  # a op b, by the cent: its exact values and whether anchored
    for (a, anchor_a), (b, anchor_b) in itertools.combinations_with_replacement(pool, 2):
        # A number against itself gives constants (x - x = 0, x / x = 1), not a value the user computed.
        for result in (_apply(a, b) if a != b else (a + b, a * b)):
            pairs.setdefault(_cents(result), []).append((result, anchor_a or anchor_b))
    if any(anchor for _, anchor in pairs.get(target, ())):
        return True
    # (a op b) op c: for each c, the partner that would give `value`, found by the cent and checked exactly.
    for c, anchor_c in pool:
        partners = [value - c, value + c, c - value, value * c]
        partners += [value / c] if c else []
        partners += [c / value] if value else []
        for partner in partners:
            for exact, anchor in pairs.get(_cents(partner), ()):
                if (anchor or anchor_c) and any(_cents(r) == target for r in _apply(exact, c)):
                    return True
    return False


def _names_in(user: str, value: Any) -> bool:
    """Whether the user's (normalized) words name `value`: the whole text, or the number, as typed."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):  # an amount as typed: "10%" names no record of amount 10 or 0.10
        return any(_cents(float(d.replace(",", "."))) == _cents(value) for d, percent in _NUMBER.findall(user)
                   if not percent)
    text = normalize(str(value))
    return bool(text) and any(spans(user, part) for part in (text, text.split("\n", 1)[0]) if part.strip())


def records_in(result: Any) -> list[Mapping[str, Any]]:
    """Every record (a dict) of a JSON-like tool result, nested ones included, parents before their children."""
    # An explicit stack holding containers only: the guard walks every result of an episode's calls, and a recursive
    # generator testing each leaf against `Mapping` was most of a guarded step's time.
    found: list[Mapping[str, Any]] = []
    stack = [result] if _is_container(result) else []
    while stack:
        item = stack.pop()
        children = item if isinstance(item, _SEQUENCES) else _record(item, found)
        stack.extend([child for child in reversed(children) if _is_container(child)])
    return found


_SCALARS = (str, int, float, bool, type(None))
_SEQUENCES = (list, tuple)


def _record(item: Mapping[str, Any], found: list[Mapping[str, Any]]) -> list[Any]:
    found.append(item)
    return list(item.values())


def _is_container(value: Any) -> bool:
    if isinstance(value, _SCALARS):
        return False
    return isinstance(value, (dict, list, tuple, Mapping))  # the exact types first: the ABC check is slow


def stamped_values(result: Any, names: Iterable[str], stamped: Iterable[str], user: str,
                   records: list[Mapping[str, Any]] | None = None) -> list[Any]:
    """The values of the `stamped` fields of each record of `result` that the user names by a `names` field
    (`records`: `records_in(result)`, when the caller has it)."""
    names, stamped = tuple(names), tuple(stamped)
    if not stamped:
        return []
    return [record[f] for record in (records_in(result) if records is None else records)
            if any(_names_in(user, record.get(n)) for n in names)
            for f in stamped if record.get(f) is not None]


def _words(text: str) -> list[str]:
    return _WORD.findall(normalize(text))


def _run_in(run: list[str], words: list[str]) -> bool:
    return f" {' '.join(run)} " in f" {' '.join(words)} "


def _longest_run(user: list[str], words: list[str]) -> list[str]:
    """The longest run of two or more consecutive `words` that the user wrote consecutively ([] if none)."""
    for size in range(len(words), 1, -1):
        for start in range(len(words) - size + 1):
            if _run_in(words[start:start + size], user):
                return words[start:start + size]
    return []


def described(user: str, records: Mapping[str, Mapping[str, Any]], fields: Iterable[str], key: str) -> bool:
    """Whether the user's words describe record `key` by its names: they hold a run of two or more words of one of
    its name fields ("grocery list" of grocery-list-today.docx), and of all the records whose names hold that run,
    `key`'s is the one the run covers most (no tie): "dental check-up" is the event described as "Regular dental
    check-up.", not the one whose long description mentions a dental check-up in passing."""
    fields, said = tuple(fields), _words(user)
    own = records.get(key, {})
    run = max((_longest_run(said, _words(str(own.get(f) or ""))) for f in fields), key=len, default=[])
    if not run:
        return False

    def share(record: Mapping[str, Any]) -> float:
        names = [_words(str(record.get(f) or "")) for f in fields]
        return max((len(run) / len(w) for w in names if w and _run_in(run, w)), default=0.0)

    top = share(own)
    return not any(share(r) >= top for k, r in records.items() if k != key)


def ranked(user: str, records: Mapping[str, Mapping[str, Any]], ranks: Mapping[str, str]) -> set[str]:
    """The keys of the records a superlative in the user's words picks ("largest" -> {"largest": "size"}: the record
    with the largest size; "-size": the smallest)."""
    picked: set[str] = set()
    for word, field in ranks.items():
        if not spans(user, normalize(word)):
            continue
        name, sign = (field[1:], -1.0) if field.startswith("-") else (field, 1.0)
        values: dict[str, float] = {k: v for k, r in records.items()
                                    if isinstance(v := r.get(name), int | float) and not isinstance(v, bool)}
        if values:
            top = max(sign * v for v in values.values())
            picked.update(k for k, v in values.items() if sign * v == top)
    return picked
