"""Typed atoms of the values a sink call carries: one address per atom, a URL's host, userinfo and query values, and
the values in free text (addresses, links, IBANs, phone numbers, codes) that content may not carry to a stranger.

Every rule of the guard runs on atoms, never on an argument's raw string: `mark@x.com,emma@corp.com` is two
recipients, and `evil.com/u?who=emma@corp.com` has the host `evil.com`. A value that does not parse as its type
(`AtomError`) is refused for a sink argument. Parsing is on the normal form (`envgym.guard.text.normalize`: NFKC,
case, spelled-out "at"/"dot" for any public suffix); hosts are IDNA-encoded, and a host or address that mixes
scripts (a Cyrillic "ѕ" among Latin letters) does not parse: a look-alike is refused, never trusted as the name it
imitates.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar
from urllib.parse import parse_qsl, urlsplit

from envgym.guard.text import addresses_and_links, is_public_suffix, normalize, skeleton

T = TypeVar("T")
AtomKind = Literal["address", "host", "url", "param", "userinfo", "iban", "phone", "code"]

# A mail system splits an address list on commas, semicolons and whitespace, and reads "Name <addr>" as addr.
_LIST_SEPARATORS = re.compile(r"[,;\s]+")
_BRACKETED = re.compile(r"<([^<>]*)>")
_QUOTED = re.compile(r'"[^"]*"')
# The local parts people use (letters, digits, ". _ + - '"); the rarer signs RFC 5322 allows ("/", "?", "&", "=")
# are how a URL passes for an address, so a value with them does not parse.
_LOCAL = re.compile(r"[\w.+'-]+")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_IBAN = re.compile(r"\b[a-z]{2}\d{2}(?: ?[a-z0-9]{4}){2,7}(?: ?[a-z0-9]{1,4})?\b")
_PHONE = re.compile(r"(?<![\w+])\+?\d[\d ().-]{6,}\d(?!\w)")
_CODE = re.compile(r"(?<![\w.,-])(?=[a-z-]*\d)[a-z0-9-]{4,}(?![\w-])")


class AtomError(ValueError):
    """A value that does not parse as the type its argument holds."""


@dataclass(frozen=True)
class Atom:
    """One typed value: its kind and canonical text."""

    kind: AtomKind
    value: str


def _scripts(text: str) -> set[str]:
    """The scripts of the letters of `text` ("LATIN", "CYRILLIC", ...), from their Unicode names."""
    import unicodedata

    return {unicodedata.name(c, "?").split(" ", 1)[0] for c in text if c.isalpha()}


def _pure(parse: Callable[[str], T]) -> Callable[[str], T]:
    """`parse`, cached by its text: the guard parses the same values (a user's address, a result's links) at every
    sink call of an episode. A value that does not parse raises a fresh `AtomError` with the same message each time."""
    @functools.lru_cache(maxsize=4096)
    def cached(text: str) -> T | AtomError:
        try:
            return parse(text)
        except AtomError as error:
            return error

    @functools.wraps(parse)
    def wrapper(text: str) -> T:
        found = cached(text)
        if isinstance(found, AtomError):
            raise AtomError(*found.args)
        return found

    return wrapper


@_pure
def host(text: str) -> str:
    """The canonical host of a domain name: IDNA (ASCII) form, no "www.", no trailing dot. Raises `AtomError` if it is
    not a domain whose last label is a public suffix, or one of its labels mixes scripts."""
    return _parse_host(text)


def _parse_host(text: str) -> str:
    name = text.strip().rstrip(".")
    if not name or "." not in name:
        raise AtomError(f"{text!r} is not a domain name")
    labels = name.split(".")
    for label in labels:
        if len(_scripts(label)) > 1:
            raise AtomError(f"{text!r} mixes scripts in {label!r} (a look-alike domain)")
    try:
        encoded = name.encode("idna").decode("ascii")
    except UnicodeError as error:
        raise AtomError(f"{text!r} is not a valid internationalized domain name ({error})") from None
    encoded = encoded.lower().removeprefix("www.")
    parts = encoded.split(".")
    if not all(_LABEL.fullmatch(p) for p in parts):
        raise AtomError(f"{text!r} is not a domain name")
    if not any(is_public_suffix(".".join(parts[i:])) for i in range(1, len(parts))):
        raise AtomError(f"{text!r} does not end in a public suffix")
    return encoded


@_pure
def address(text: str) -> str:
    """One canonical address (`local@host`, the host as `host`). Raises `AtomError` if `text` is not exactly one."""
    value = text.strip().removeprefix("mailto:")
    if value.count("@") != 1:
        raise AtomError(f"{text!r} is not one email address")
    local, domain = value.split("@")
    if not _LOCAL.fullmatch(local) or len(_scripts(local)) > 1:
        raise AtomError(f"{text!r} is not one email address")
    return f"{local}@{host(domain)}"


def address_list(value: str) -> list[str]:
    """The addresses a mail system would read in `value` (separated by commas, semicolons or whitespace, or in
    "Name <addr>" form), one per item. Raises `AtomError` for any piece that is not an address."""
    return list(_address_list(value))


@_pure
def _address_list(value: str) -> tuple[str, ...]:
    normal = normalize(value)
    found = [address(a) for a in _BRACKETED.findall(normal)]
    rest = _QUOTED.sub(" ", _BRACKETED.sub(",", normal))
    pieces = [p for p in _LIST_SEPARATORS.split(rest) if p]
    if found:  # "Name <addr>": words without "@" are the display name
        pieces = [p for p in pieces if "@" in p]
    found += [address(p) for p in pieces]
    if not found:
        raise AtomError(f"{value!r} holds no email address")
    return tuple(found)


@dataclass(frozen=True)
class Url:
    """A parsed URL: its host, canonical form (host, path, sorted query; no scheme), userinfo and query values."""

    host: str
    canonical: str
    userinfo: str
    params: tuple[str, ...]
    fragment: str


def url(value: str) -> Url:
    """A URL with or without a scheme, by the standard URL parser (`urllib.parse.urlsplit`): the host is the
    authority's, after any userinfo. Raises `AtomError` unless it is an http(s) or scheme-less URL with a host."""
    normal = normalize(value).strip()
    if not normal or any(c.isspace() for c in normal):
        raise AtomError(f"{value!r} is not one URL")
    parts = urlsplit(normal if "://" in normal else "//" + normal)
    if parts.scheme not in ("", "http", "https"):
        raise AtomError(f"{value!r} is not an http(s) URL")
    try:
        hostname = parts.hostname or ""
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as error:
        raise AtomError(f"{value!r} is not a URL ({error})") from None
    name = host(hostname)
    query = sorted(parse_qsl(parts.query, keep_blank_values=True))
    params = tuple(normalize(v) for _, v in query if v)
    path = parts.path.rstrip("/")
    canonical = name + path + ("?" + "&".join(f"{k}={v}" for k, v in query) if query else "")
    userinfo = normalize(parts.netloc.rsplit("@", 1)[0]) if "@" in parts.netloc else ""
    return Url(name, canonical, userinfo, params, parts.fragment)


def url_or_none(value: str) -> Url | None:
    try:
        return url(value)
    except AtomError:
        return None


def text_atoms(text: str) -> list[Atom]:
    """The values in free text a stranger could use: addresses, links and hosts (any spelling the skeleton shows),
    IBANs, phone numbers and codes (a token of four or more characters with a digit)."""
    return list(_text_atoms(text))


# A pure function of the text, and the guard asks it of the same texts (the user's request, each result) at every
# sink call of an episode. Cached (and `_pure` above), the guard's CPU on a workspace step fell from 10.9x to ~2.5x.
@functools.lru_cache(maxsize=4096)
def _text_atoms(text: str) -> tuple[Atom, ...]:
    view = skeleton(text)
    atoms: list[Atom] = []
    for token in addresses_and_links(view):
        if "@" in token and "://" not in token and "/" not in token:
            atoms.append(Atom("address", token))
            atoms.append(Atom("host", token.rsplit("@", 1)[1].removeprefix("www.")))
        else:
            parsed = url_or_none(token)
            atoms.append(Atom("url", parsed.canonical if parsed else token))
            if parsed is not None:
                atoms.append(Atom("host", parsed.host))
    for match in _IBAN.finditer(view):
        atoms.append(Atom("iban", match.group(0).replace(" ", "")))
    for match in _PHONE.finditer(view):
        digits = re.sub(r"\D", "", match.group(0))
        if len(digits) >= 7:
            atoms.append(Atom("phone", digits))
    for match in _CODE.finditer(view):
        atoms.append(Atom("code", match.group(0)))
    return tuple(atoms)


def value_key(atom: Atom) -> str:
    """The form two spellings of the same value share (an IBAN without spaces, a phone number's digits)."""
    return atom.value
