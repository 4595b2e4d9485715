"""Where the values of one episode came from: the user's turns, the system prompt, trusted records, untrusted data.

A `Provenance` is fed every text the agent has seen, labelled by origin, and answers one question per argument
value: `sources(value)`, the set of origins that could have given it. Values are compared in their normal form
(`envgym.guard.text.normalize`), so a rewrite (case, spacing, "[at]", percent- or base64-encoding) keeps the
origin of what it rewrites. Work is lazy: a tool result is only parsed when a held-back call needs the answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from envgym.guard.text import addresses_and_links, decoded_views, host_of, normalize, spans, squash

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


def _parse(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content


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
        self._pending: list[tuple[str, bool]] = []
        self._trusted: set[str] = set()
        self._untrusted_leaves: list[str] = []
        self._untrusted_text = ""
        self._untrusted_squashed = ""
        self._indicators: set[str] = set()
        self._said: tuple[str, str] | None = None

    # ---------------------------------------------------------------- feeding

    def add_user(self, text: str) -> None:
        self._user.append(normalize(text))
        self._said = None

    def add_system(self, text: str) -> None:
        self._system.append(normalize(text))
        self._said = None

    def add_result(self, content: str, trusted: bool) -> None:
        self._pending.append((content, trusted))
        self.tainted = self.tainted or not trusted

    def _settle(self) -> None:
        """Parse the results added since the last question."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        untrusted: list[str] = []
        for content, trusted in pending:
            values = [normalize(v) for v in leaves(_parse(content))]
            if trusted:
                self._trusted.update(values)
            else:
                self._untrusted_leaves.extend(values)
                untrusted.append(content)
        if untrusted:
            views = [view for content in untrusted for view in decoded_views(content)]
            self._untrusted_text += "\n" + "\n".join(views)
            self._untrusted_squashed += "\n" + "\n".join(squash(v) for v in views)
            for view in views:
                for token in addresses_and_links(view):
                    self._indicators.add(token)
                    self._indicators.add(host_of(token))

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
        self._settle()
        low = normalize(value if isinstance(value, str) else json.dumps(value))
        found: set[str] = set()
        if not low:
            return found
        if low in self.allow_recipients or (" " not in low and "." in low and host_of(low) in self.allow_domains):
            found.add(ALLOWED)
        user, system = self.said
        if self._typed_by_user(user, low):
            found.add(USER)
        if spans(system, low):
            found.add(SYSTEM)
        if low in self._trusted:
            found.add(TRUSTED)
        return found

    def _typed_by_user(self, user: str, low: str) -> bool:
        """Whether the user said `low` themselves, not only as part of a longer piece of untrusted data they quoted
        (an event title, a subject): an address inside a quoted title was chosen by whoever wrote the title."""
        where = spans(user, low)
        if not where:
            return False
        longer = [leaf for leaf in self._untrusted_leaves if len(leaf) > len(low) and low in leaf]
        for start, end in where:
            if not any(qs <= start and end <= qe for leaf in longer for qs, qe in spans(user, leaf)):
                return True
        return False

    def in_untrusted(self, value: str) -> bool:
        """Whether `value` (any spelling) occurs in untrusted text."""
        self._settle()
        low = normalize(value)
        return bool(low) and (low in self._untrusted_text or (len(squash(low)) >= 6
                                                            and squash(low) in self._untrusted_squashed))

    def untrusted_tokens(self, text: str) -> list[str]:
        """Addresses, links and hosts in `text` (any spelling, base64 included) that untrusted data wrote and no
        trusted origin gave: the markers of a value copied out of untrusted data into content."""
        self._settle()
        found: list[str] = []
        views = decoded_views(text)
        for view in views:
            for token in addresses_and_links(view):
                if token not in found and not self.sources(token):
                    found.append(token)
        if self._indicators:
            squashed = "\n".join(squash(v) for v in views)
            for indicator in sorted(self._indicators):
                if (len(indicator) >= 6 and squash(indicator) in squashed and indicator not in found
                        and not self.sources(indicator) and not any(indicator in f for f in found)):
                    found.append(indicator)
        return found
