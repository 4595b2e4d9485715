"""Where the values of one episode came from: the user's turns, the system prompt, trusted records, untrusted data.

A `Provenance` is fed every text the agent has seen, labelled by origin, and answers one question per argument
value: `sources(value)`, the set of origins that could have given it. Values are compared in their normal form
(`envgym.guard.text.normalize`), so a rewrite (case, spacing, "[at]", percent- or base64-encoding) keeps the
origin of what it rewrites. Trust attaches to whole field values of trusted records (`add_trusted_values`), never
to a substring of their serialized text: an address inside a contact's display name is not a trusted address.
Values the user *named* (typed, or a platform field of a record the user named: `add_named`) are a subset of the
trusted ones; content may flow to a recipient the user did not name only without values that untrusted data alone
wrote (`untrusted_values`). Work is lazy: a tool result is only parsed when a held-back call needs the answer.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from envgym.guard.atoms import AtomError, address_list, text_atoms, url_or_none
from envgym.guard.derive import asks_to_compute, computed, numbers_in
from envgym.guard.intent import without_directives
from envgym.guard.text import addresses_and_links, decoded_views, host_of, normalize, spans, squash

_RUN = 8  # words: a run this long copied out of untrusted text is that text's content (a file's, an email's)

USER, SYSTEM, TRUSTED, ALLOWED = "user", "system", "trusted", "allow_list"
SOURCES = (USER, SYSTEM, TRUSTED, ALLOWED)


def leaves(value: Any) -> Iterator[str]:
    """Every scalar inside a JSON-like value, as text (None skipped)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from leaves(item)
    elif value is not None:
        yield value if isinstance(value, str) else json.dumps(value)


def leaf_list(value: Any) -> tuple[str, ...] | list[str]:
    """`leaves(value)` as a sequence; a string or None, the common argument values, without a generator."""
    if isinstance(value, str):
        return (value,)
    return () if value is None else list(leaves(value))


@functools.lru_cache(maxsize=2048)  # pure; an env's episodes read the same results again and again
def _normal_leaves(content: str) -> tuple[str, ...]:
    """The normal forms of every scalar of a tool result (JSON, or one text)."""
    return tuple(normalize(v) for v in leaves(parse_result(content)))


@functools.lru_cache(maxsize=2048)  # pure; an env's episodes read the same results again and again
def _content_atoms(content: str) -> tuple[frozenset[str], frozenset[str]]:
    """The atom values and the runs of `_RUN` words (joined by one space) of one untrusted text, in each of its
    decoded views."""
    values: set[str] = set()
    runs: set[str] = set()
    for view in decoded_views(content):
        values.update(a.value for a in text_atoms(view))
        runs.update(_runs_of(view.split()))
    return frozenset(values), frozenset(runs)


def _runs_of(words: list[str]) -> list[str]:
    # Joined, not tuples: words hold no whitespace, so the join is one-to-one, and a string keeps its hash.
    return [" ".join(words[i:i + _RUN]) for i in range(len(words) - _RUN + 1)]


@functools.lru_cache(maxsize=256)  # pure; asked at every judged call of an episode, of the same request
def _said_atoms(user: str, system: str) -> tuple[frozenset[str], frozenset[str]]:
    """The atom values, and the hosts among them, of what the user and the system prompt said (normalized)."""
    atoms = text_atoms(user + "\n" + system)
    return frozenset(a.value for a in atoms), frozenset(a.value for a in atoms if a.kind == "host")


@functools.lru_cache(maxsize=4096)  # pure; content arguments are judged against every untrusted text seen
def _word_runs(text: str) -> tuple[str, ...]:
    """The runs of `_RUN` consecutive words of `text`'s normal form (joined by one space), in order."""
    return tuple(_runs_of(normalize(text).split()))


@dataclass(frozen=True)
class _Untrusted:
    """What the questions about untrusted data need of the `count` untrusted texts an episode has seen: their normal
    views joined (`text`) and squashed, their indicators (address, link or host -> its squashed form), their atom
    values, their runs of `_RUN` words and the normal forms of their scalars (`leaves`)."""

    count: int
    text: str
    squashed: str
    indicators: Mapping[str, str]
    values: frozenset[str]
    runs: frozenset[str]
    leaves: tuple[str, ...]


# Keyed by the texts themselves: an env's episodes see the same untrusted results in the same order again and again,
# and a provenance is fresh each episode, so merging them per episode was a large share of a judged call's time.
@functools.lru_cache(maxsize=1024)
def _digest(contents: tuple[str, ...]) -> _Untrusted:
    text = squashed = ""
    indicators: dict[str, str] = {}
    values: set[str] = set()
    runs: set[str] = set()
    leaves_: list[str] = []
    for content in contents:
        views, views_squashed, _, found = _scan(content)
        text += "\n" + views
        squashed += "\n" + views_squashed
        indicators.update(found)
        content_values, content_runs = _content_atoms(content)
        values.update(content_values)
        runs.update(content_runs)
        leaves_.extend(_normal_leaves(content))
    return _Untrusted(len(contents), text, squashed, indicators, frozenset(values), frozenset(runs), tuple(leaves_))


def parse_result(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content


@functools.lru_cache(maxsize=4096)  # training replays the same records episode after episode
def _scan(content: str) -> tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """A text's normal views (base64 decoded too) joined, the same squashed, its addresses and links, and its
    indicators: (address, link or host, its squashed form)."""
    views = decoded_views(content)
    tokens = tuple(dict.fromkeys(token for view in views for token in addresses_and_links(view)))
    indicators: dict[str, str] = {}
    for token in tokens:
        for item in (token, host_of(token)):
            indicators.setdefault(item, squash(item))
    return "\n".join(views), "\n".join(squash(v) for v in views), tokens, tuple(indicators.items())


@functools.lru_cache(maxsize=4096)  # pure; every judged recipient is checked against the allow-list first
def _allowed_host(low: str, domains: tuple[str, ...]) -> bool:
    """Whether `low` is exactly one address, or one URL without userinfo or query, at an allow-listed domain."""
    try:
        found = address_list(low)
    except AtomError:
        parsed = url_or_none(low)
        return parsed is not None and not parsed.userinfo and not parsed.params and parsed.host in domains
    return len(found) == 1 and found[0].rsplit("@", 1)[1] in domains


@dataclass(frozen=True)
class Effect:
    """What recording one tool result adds to a provenance (`Provenance.effect`, `Provenance.apply`): untrusted texts,
    trusted texts, whole trusted values and their hosts, named values and private values, in the order recorded."""

    untrusted: tuple[str, ...]
    trusted: tuple[str, ...]
    trusted_values: frozenset[str]
    trusted_hosts: frozenset[str]
    named: frozenset[str]
    private: tuple[tuple[str, str], ...]


class Provenance:
    """The origins of the text one episode has shown the agent.

    `add_user` / `add_system` record what the user and the system prompt said; `add_result(content, trusted)`
    records a tool result (a JSON text or an error message): `trusted=True` for a read-only tool whose records the
    attacker cannot write, False for a tool that reads untrusted data (its errors included). `tainted` says whether
    any untrusted text has been seen.
    """

    def __init__(self, allow_domains: tuple[str, ...] = (), allow_recipients: frozenset[str] = frozenset()):
        self.allow_domains = allow_domains
        self.allow_recipients = allow_recipients
        self.tainted = False
        self._user: list[str] = []
        self._system: list[str] = []
        self._trusted: list[str] = []  # lower-case texts of trusted results (for their numbers)
        self._trusted_values: set[str] = set()  # normal forms of whole field values of trusted records
        self._trusted_hosts: set[str] = set()  # hosts of the addresses and URLs among them
        self._named: set[str] = set()  # platform-written values of records the user named
        self._untrusted: list[str] = []  # untrusted results and error messages, as shown
        self._digest: _Untrusted | None = None  # of `_untrusted`, on first need (`_untrusted_digest`)
        self._said: tuple[str, str] | None = None
        self.private: dict[str, str] = {}  # normal form of a private value -> its field
        # Untrusted results of reads that chose their source by strings (a file name, a URL, a channel), whether the
        # read was a fetch from an outside server: `delegated` decides at question time whether the user typed them.
        self._pointed: list[tuple[str, Mapping[str, Any], bool]] = []

    # ---------------------------------------------------------------- feeding

    def add_user(self, text: str) -> None:
        self._user.append(normalize(text))
        self._said = None

    def add_system(self, text: str) -> None:
        self._system.append(normalize(text))
        self._said = None

    def add_result(self, content: str, trusted: bool, arguments: Mapping[str, Any] | None = None,
                   fetch: bool = False) -> None:
        """Record a tool result. `arguments`: the call's, whose strings chose an untrusted result's source (its file
        name, URL, channel, query); `fetch`: the read went to an outside server."""
        if trusted:
            self.add_trusted_values(leaves(parse_result(content)))
        else:
            self._untrusted.append(content)
            self.tainted = True
            if arguments:
                self._pointed.append((content, arguments, fetch))

    def add_trusted_values(self, values: Any) -> None:
        """Record whole field values of trusted records (an address field, a name field): each value, and each
        address of a value that is an address list, is trusted; nothing inside a longer value is."""
        for value in values:
            low = normalize(value if isinstance(value, str) else json.dumps(value))
            if not low:
                continue
            self._trusted.append(low)  # for the numbers it holds (`numbers`)
            self._trusted_values.add(low)
            if "@" in low or "." in low:
                try:
                    found = address_list(low)
                except AtomError:
                    parsed = url_or_none(low)
                    if parsed is not None:
                        self._trusted_hosts.add(parsed.host)
                    continue
                self._trusted_values.update(found)
                self._trusted_hosts.update(a.rsplit("@", 1)[1] for a in found)

    def add_named(self, values: Any) -> None:
        """Record platform-written values of a record the user named (its sender, participants): trusted and
        named by the user."""
        values = list(values)
        self.add_trusted_values(values)
        for value in values:
            low = normalize(value if isinstance(value, str) else json.dumps(value))
            self._named.add(low)
            with contextlib.suppress(AtomError):
                self._named.update(address_list(low))

    def add_private(self, value: str, field: str) -> None:
        """Record a value of a private field (`GuardConfig.private`); short values are too common to track."""
        low = normalize(value)
        if len(squash(low)) >= 4:
            self.private[low] = field

    # A guard records each result into an empty provenance that knows only the user's words (`scratch`), keeps the
    # `Effect` and applies it to the episode's: what a result adds depends on nothing else, and training shows the
    # same results to the same requests episode after episode, so the parsing runs once per distinct result.

    @classmethod
    def scratch(cls, user: str) -> Provenance:
        """An empty provenance whose user said `user` (normalized), to record one result into (`effect`)."""
        scratch = cls()
        if user:
            scratch._user.append(user)
        return scratch

    def effect(self) -> Effect:
        """What the results recorded into this scratch provenance add (its user's words are not part of it)."""
        return Effect(tuple(self._untrusted), tuple(self._trusted), frozenset(self._trusted_values),
                      frozenset(self._trusted_hosts), frozenset(self._named), tuple(self.private.items()))

    def apply(self, effect: Effect, arguments: Mapping[str, Any] | None = None, fetch: bool = False) -> None:
        """Add what `effect` records, as if its results were recorded here (`arguments`, `fetch`: as in
        `add_result`, for its untrusted texts)."""
        if effect.untrusted:
            self._untrusted.extend(effect.untrusted)
            self.tainted = True
            if arguments:
                for content in effect.untrusted:
                    self._pointed.append((content, arguments, fetch))
        if effect.trusted:  # most results add to only some of these: skip the empty ones
            self._trusted.extend(effect.trusted)
            self._trusted_values |= effect.trusted_values
            self._trusted_hosts |= effect.trusted_hosts
        if effect.named:
            self._named |= effect.named
        if effect.private:
            self.private.update(effect.private)

    # Parsing and scanning are lazy: most steps are never judged, and most judged calls need neither.

    def _untrusted_digest(self) -> _Untrusted:
        if self._digest is None or self._digest.count != len(self._untrusted):
            self._digest = _digest(tuple(self._untrusted))
        return self._digest

    @property
    def said(self) -> tuple[str, str]:
        """(what the user said, what the system prompt said), normalized."""
        if self._said is None:
            self._said = ("\n".join(self._user), "\n".join(self._system))
        return self._said

    # ---------------------------------------------------------------- questions

    def sources(self, value: Any) -> set[str]:
        """The trusted origins of `value` (a scalar): any of USER, SYSTEM, TRUSTED, ALLOWED (empty: none; whether
        untrusted text also holds it is `in_untrusted`)."""
        low = normalize(value if isinstance(value, str) else json.dumps(value))
        return {source for source in SOURCES if low and self._has(source, low)}

    def trusted(self, value: Any) -> bool:
        """Whether `value` has any trusted origin (`sources`, stopping at the first one found, cheapest first)."""
        low = normalize(value if isinstance(value, str) else json.dumps(value))
        return bool(low) and (self._has(ALLOWED, low) or self._has(TRUSTED, low) or self._has(USER, low)
                              or self._has(SYSTEM, low))

    def named(self, value: Any) -> bool:
        """Whether the user named `value`: typed it (not only inside quoted untrusted text), the system prompt says it
        (the user's own address), or it is a platform-written value of a record the user named."""
        low = normalize(value if isinstance(value, str) else json.dumps(value))
        return bool(low) and (low in self._named or self._has(USER, low) or self._has(SYSTEM, low))

    def host_trusted(self, host: str) -> bool:
        """Whether a host (canonical, see `envgym.guard.atoms.host`) is allow-listed, or the host of an address or
        link the user, the system prompt or a trusted record gave."""
        if host in self.allow_domains or host in self._trusted_hosts:
            return True
        return host in _said_atoms(*self.said)[1]

    def _has(self, source: str, low: str) -> bool:
        if source == ALLOWED:
            return low in self.allow_recipients or (" " not in low and "." in low and _allowed_host(low,
                                                                                                 self.allow_domains))
        if source == TRUSTED:
            return low in self._trusted_values
        user, system = self.said
        return self._typed_by_user(user, low) if source == USER else bool(spans(system, low))

    def _typed_by_user(self, user: str, low: str) -> bool:
        """Whether the user said `low` themselves, not only as part of a longer piece of untrusted data they quoted
        (an event title, a subject): an address inside a quoted title was chosen by whoever wrote the title."""
        where = spans(user, low)
        if not where:
            return False
        longer = [leaf for leaf in self._untrusted_digest().leaves if len(leaf) > len(low) and low in leaf]
        for start, end in where:
            if not any(qs <= start and end <= qe for leaf in longer for qs, qe in spans(user, leaf)):
                return True
        return False

    def pointed_sources(self, for_fetch: bool = False) -> list[str]:
        """The untrusted texts the user pointed at: results of reads whose every selector the user typed (delegation
        does not chain: a source chosen by another source's words is not one), each without the sentences that order
        its reader to act (`envgym.guard.intent.without_directives`: a source delegates what it states, never its
        instructions). `for_fetch`: fetched pages left out, so that no link found on a page is followed on the user's
        behalf (crawling on the page's word)."""
        user = self.said[0]
        found = []
        for text, arguments, fetched in self._pointed:
            selectors = [normalize(v) for v in arguments.values() if isinstance(v, str) and v.strip()]
            if selectors and not (for_fetch and fetched) and all(self._typed_by_user(user, s) for s in selectors):
                found.append(normalize(without_directives(text)))
        return found

    def delegated(self, value: Any, for_fetch: bool = False) -> bool:
        """Whether `value` is written, as a whole token, in a source the user pointed at (`pointed_sources`)."""
        low = normalize(value if isinstance(value, str) else json.dumps(value))
        return bool(low) and any(spans(text, low) for text in self.pointed_sources(for_fetch))

    def delegates(self, value: Any, for_fetch: bool = False) -> bool:
        """Whether the user delegated `value`: written in a source they pointed at (`delegated`), or a number
        computed from the user's, such sources' and trusted records' numbers (`envgym.guard.derive.computed`) when
        the request or such a source speaks of a computation (`asks_to_compute`)."""
        if self.delegated(value, for_fetch):
            return True
        try:
            number = float(value)
        except (TypeError, ValueError):
            return False
        if not math.isfinite(number):
            return False
        anchored, trusted = self.numbers()
        if any(asks_to_compute(text) for text in (self.said[0], *self.pointed_sources())):
            return computed(number, anchored, trusted)
        return any(round(n * 100) == round(number * 100) for n in anchored)  # a number written, not computed

    def numbers(self) -> tuple[list[float], list[float]]:
        """(numbers the user typed or a source the user pointed at says, numbers in trusted records)."""
        anchored = numbers_in(self.said[0])
        for text in self.pointed_sources():
            anchored += numbers_in(text)
        trusted = [n for text in self._trusted for n in numbers_in(text)]
        return anchored, trusted

    def in_untrusted(self, value: str) -> bool:
        """Whether `value` (any spelling) occurs in untrusted text."""
        digest = self._untrusted_digest()
        low = normalize(value)
        return bool(low) and (low in digest.text or (len(squash(low)) >= 6 and squash(low) in digest.squashed))

    def private_in(self, text: str) -> list[str]:
        """The private fields whose values `text` holds, in any spelling its normal form shows."""
        low = normalize(text)
        squashed = squash(low)
        return list(dict.fromkeys(field for value, field in self.private.items()
                                  if value in low or squash(value) in squashed))

    def untrusted_values(self, text: str) -> list[str]:
        """The values in `text` (addresses, links, hosts, IBANs, phone numbers, codes, and runs of eight words) that
        untrusted data wrote and no trusted origin gave: what may not flow to a recipient the user did not name."""
        digest = self._untrusted_digest()
        values, runs = digest.values, digest.runs
        user, system = self.said
        said = _said_atoms(user, system)[0]
        found = [a.value for a in text_atoms(text)
                 if a.value in values and a.value not in said and a.value not in self._trusted_values
                 and not (a.kind == "host" and self.host_trusted(a.value))]
        if runs:
            for run in _word_runs(text):
                if run in runs and run not in user:
                    found.append(run)
                    break
        return list(dict.fromkeys(found))

    def untrusted_tokens(self, text: str) -> list[str]:
        """Addresses, links and hosts in `text` (any spelling, base64 included) that untrusted data wrote and no
        trusted origin gave: the markers of a value copied out of untrusted data into content."""
        indicators = self._untrusted_digest().indicators
        _, squashed, own, _ = _scan(text)
        found = [token for token in own if not self.trusted(token)]
        for indicator, short in indicators.items():
            # An indicator inside an address or link of the text was judged with it (a contact's host is fine).
            if (len(short) >= 6 and short in squashed and not any(indicator in token for token in own)
                    and not self.trusted(indicator)):
                found.append(indicator)
        return found
