"""`json` encode and decode without the per-call set-up of `JSONEncoder.encode` and `JSONDecoder.decode`.

Both build their C machinery again on every call (an encoder object, its circular-reference markers, two
whitespace matches); on a tool call of a few dozen bytes that set-up costs more than the work itself, and the env
does it on every step. These functions give the same text, the same objects and the same errors as the stock
`encode`/`decode` with the same options: the C encoder is built once per thread (its markers dict is shared by
calls in the thread, so two threads never see each other's markers) and a decode that fails is done again the
stock way, to raise exactly the stock error.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from json import scanner
from typing import Any

c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # None only without CPython's C accelerator
_WHITESPACE = re.compile(r"[ \t\n\r]*", re.VERBOSE | re.MULTILINE | re.DOTALL)  # what json.decoder skips
_SPACE = frozenset(" \t\n\r")


def encoder(**options: Any) -> Callable[[Any], str]:
    """`json.JSONEncoder(**options).encode`, faster for containers (str input keeps the stock path)."""
    stock = json.JSONEncoder(**options)
    if c_make_encoder is None or stock.indent is not None or not stock.check_circular:
        return stock.encode
    basestring = json.encoder.encode_basestring_ascii if stock.ensure_ascii else json.encoder.encode_basestring
    local = threading.local()

    def build() -> Callable[[Any, int], Any]:
        made = c_make_encoder({}, stock.default, basestring, None, stock.key_separator,
                              stock.item_separator, stock.sort_keys, stock.skipkeys, stock.allow_nan)
        local.encode = made
        return made

    def encode(o: Any) -> str:
        if isinstance(o, str):
            return stock.encode(o)
        try:
            run = local.encode
        except AttributeError:
            run = build()
        try:
            return "".join(run(o, 0))
        except BaseException:
            # A failed encode may leave ids in the markers dict: the next call gets a fresh encoder.
            build()
            raise

    return encode


def decoder() -> Callable[[str], Any]:
    """`json.JSONDecoder().decode`, faster; any failure raises the stock error (it decodes again the stock way)."""
    stock = json.JSONDecoder()
    scan_once = scanner.make_scanner(stock)  # type: ignore[arg-type]
    skip = _WHITESPACE.match

    def decode(s: str) -> Any:
        # The whitespace scans are skipped where a look at one character shows there is none to skip.
        try:
            obj, end = scan_once(s, skip(s, 0).end() if s[:1] in _SPACE else 0)  # type: ignore[union-attr,unused-ignore]
        except Exception:
            return stock.decode(s)
        if end != len(s) and skip(s, end).end() != len(s):  # type: ignore[union-attr,unused-ignore]
            return stock.decode(s)
        return obj

    return decode
