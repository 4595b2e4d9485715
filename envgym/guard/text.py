"""Text the guard reads and writes: normal forms of values, addresses and links in free text, and escaping.

Normalization is what lets provenance survive the rewrites an attacker asks for: case, whitespace, "[at]"/"[dot]"
spellings, percent-encoding and base64 all map back to the value they spell. Escaping keeps untrusted text from
closing the untrusted-data delimiter or speaking in a chat template's control tokens.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import unicodedata
from typing import Any
from urllib.parse import unquote, urlsplit

UNTRUSTED_OPEN = "<untrusted_data"
UNTRUSTED_CLOSE = "</untrusted_data>"

# Chat-template control tokens (<|im_start|>, <|eot_id|>, ...), tool-call and tool-result tags of every format we
# speak, the delimiter itself, and Llama/Mistral/Gemma turn markers. One leading literal "<" keeps the scan fast.
_ANGLE_RE = re.compile(
    r"<(?:\s*\|[^<>|\n]{0,40}\|\s*"
    r"|\s*/?\s*(?:untrusted_data|tool_call|tool_response|tool_result|tools|function_calls?|function_results?|"
    r"functions|invoke|parameter|im_start|im_end|start_of_turn|end_of_turn|system|assistant|user|s)\b[^<>\n]{0,80}"
    r"|<\s*/?\s*SYS\s*)>",
    re.IGNORECASE,
)
_SQUARE_TOKENS = ("[INST]", "[/INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[AVAILABLE_TOOLS]",
                  "[/AVAILABLE_TOOLS]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]")
# One pass for all of them: no token is part of another, and an escaped token holds none.
_SQUARE_RE = re.compile("|".join(re.escape(token) for token in _SQUARE_TOKENS))
_ESCAPES = str.maketrans({"<": "&lt;", ">": "&gt;", "[": "&#91;", "]": "&#93;"})

# On text whose whitespace is already one space: "[at]", "(dot)", "{@}" ..., and the bare words " at " / " dot "
# where a domain follows whose last label is a public suffix (any TLD the public suffix list knows).
_BRACKETED = re.compile(r" ?[\[({<] ?(at|@|dot|\.) ?[\])}>] ?")
_WORD_DOT = re.compile(r"(?<=[\w-]) dot ([\w-]+)")
_WORD_AT = re.compile(r"(?<=[\w.+-]) at ((?:[\w-]+\.)+([\w-]+))\b")
_B64_RE = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_LINK_RE = re.compile(
    r"(?:[a-z][a-z0-9+.-]*://[^\s\"'<>]+"  # any scheme
    r"|(?<![@\w.-])(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+([^\W\d_]{2,24}|xn--[a-z0-9-]+)\b(?![@-])"
    r"(?:[/?#:][^\s\"'<>]*)?)"
)
# Scheme-less "domains" that are file names, not hosts (unless a path follows).
_FILE_SUFFIXES = frozenset(["txt", "pdf", "doc", "docx", "xls", "xlsx", "csv", "ppt", "pptx", "md", "json", "yaml",
                            "yml", "png", "jpg", "jpeg", "gif", "zip", "py", "js", "html", "htm", "xml", "log", "ics",
                            "eml", "key", "pages", "numbers"])


@functools.cache
def _suffixes() -> Any:
    """The public suffix list (the snapshot the `publicsuffixlist` package ships: no network)."""
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList(only_icann=True)


def is_public_suffix(label: str) -> bool:
    """Whether `label` ("com", "online", "co.uk", "рф") is a suffix of the public suffix list."""
    return bool(label) and bool(_suffixes().is_public(label, accept_unknown=False))


def is_file_suffix(label: str) -> bool:
    """Whether `label` (lower case) is a common file-name suffix ("txt", "docx"): "notes.txt" names a file."""
    return label in _FILE_SUFFIXES


@functools.cache
def _confusables() -> dict[str, str]:
    """Each character the Unicode confusables table (package `confusable-homoglyphs`) lists as a look-alike of one
    ASCII letter, digit or address sign, mapped to that character."""
    from confusable_homoglyphs.confusables import confusables_data

    table: dict[str, str] = {}
    for char, glyphs in confusables_data.items():
        if len(char) != 1 or char.isascii():
            continue
        ascii_glyphs = [g["c"] for g in glyphs if len(g["c"]) == 1 and g["c"].isascii()
                        and (g["c"].isalnum() or g["c"] in ".@-_/:")]
        if ascii_glyphs:
            table[char] = ascii_glyphs[0].lower()
    return table


def escape_control(text: str) -> str:
    """`text` with every delimiter tag and chat-template control token made inert ("<" as "&lt;" and so on)."""
    if "<" in text:
        text = _ANGLE_RE.sub(lambda m: m.group(0).translate(_ESCAPES), text)
    if "[" in text and ("_" in text or "INST]" in text):  # every square token has "[" and one of these
        text = _SQUARE_RE.sub(lambda m: m.group(0).translate(_ESCAPES), text)
    return text


@functools.lru_cache(maxsize=16384)  # pure; the guard normalizes the same request and results at every call
def normalize(text: str) -> str:
    """The canonical spelling of `text`: Unicode NFKC, percent-decoded, case-folded, "[at]"/"[dot]" spelled out as
    "@"/".", whitespace runs as one space, trimmed."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    if "%" in text:
        text = unquote(unquote(text))
    text = " ".join(text.casefold().split())
    if "at" in text or "dot" in text or "@" in text:
        text = _BRACKETED.sub(lambda m: "@" if m.group(1) in ("at", "@") else ".", text)
        if " dot " in text:
            text = _WORD_DOT.sub(lambda m: "." + m.group(1) if is_public_suffix(m.group(1)) else m.group(0), text)
        if " at " in text:
            text = _WORD_AT.sub(lambda m: "@" + m.group(1) if is_public_suffix(m.group(2)) else m.group(0), text)
    return text


@functools.lru_cache(maxsize=8192)
def skeleton(text: str) -> str:
    """`normalize(text)` with every look-alike character (Cyrillic "ѕ", Greek "ο", fullwidth signs...) replaced by the
    ASCII character it imitates: the form under which content is searched for addresses and links. Never the form
    a recipient is trusted by (a look-alike of a trusted domain is another domain)."""
    normal = normalize(text)
    if normal.isascii():
        return normal
    table = _confusables()
    return "".join(table.get(c, c) for c in normal)


def squash(normal: str) -> str:
    """A normalized text with everything but letters, digits, "@" and "." removed: survives splits by spaces,
    quotes or concatenation signs ("mark" + ".black" -> "mark.black")."""
    return re.sub(r"[^\w@.]|_", "", normal)


def decoded_views(text: str) -> list[str]:
    """`text` as its skeleton, plus the skeleton of every base64 token in it that decodes to text."""
    views = [skeleton(text)]
    for token in _B64_RE.findall(text):
        try:
            raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_" if "-" in token or "_" in token
                                   else None, validate=True)
            decoded = raw.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        if decoded.isprintable() or "\n" in decoded:
            views.append(skeleton(decoded))
    return views


def addresses_and_links(normal: str) -> list[str]:
    """The email addresses and links (with or without a scheme; a scheme-less host must end in a public suffix) in
    a normalized text."""
    found = [m.rstrip(".,;:!?)") for m in _EMAIL_RE.findall(normal)]
    for match in _LINK_RE.finditer(normal):
        link = match.group(0).rstrip(".,;:!?)'\"")
        if "://" not in link:
            host = link.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].split(":", 1)[0]
            labels = host.split(".")
            if not any(is_public_suffix(".".join(labels[i:])) for i in range(1, len(labels))):
                continue
            if labels[-1] in _FILE_SUFFIXES and link == host:
                continue
        found.append(link)
    return found


def host_of(link: str) -> str:
    """The host of an address ("a@b.com" -> "b.com") or link, with or without a scheme ("https://www.b.com/x",
    "b.com/x?u=a@c.com" -> "b.com"): the authority's host, after any userinfo, never text of the path or query."""
    if "://" not in link and "/" not in link and "?" not in link and "#" not in link:
        return link.rsplit("@", 1)[-1].removeprefix("www.")
    parts = urlsplit(link if "://" in link else "//" + link)
    return (parts.hostname or "").removeprefix("www.")


def mentions(text: str, needle: str) -> bool:
    """Whether `text` holds `needle` as a whole token, not inside a longer word (both already normalized)."""
    return bool(spans(text, needle))


def spans(text: str, needle: str) -> list[tuple[int, int]]:
    """Where `needle` occurs in `text` as a whole token."""
    found: list[tuple[int, int]] = []
    if not needle:
        return found
    start = text.find(needle)
    while start != -1:
        end = start + len(needle)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or after.isalnum()):
            found.append((start, end))
        start = text.find(needle, start + 1)
    return found
