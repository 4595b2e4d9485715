"""A reset's JSON body with the tool schemas' JSON written once per session rather than on every reset.

A reset answers with `info["tools"]`, the environment's OpenAI tool schemas: for retail-v0 3.6 kB of JSON, half of
the cost of encoding the whole answer, and the same object every episode. `ToolsJSON` keeps that object's JSON and
splices it into the body in place of a marker, so the body is byte for byte what encoding the whole info gives.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_core import PydanticSerializationError, to_json

# A string no info holds (random per process); its JSON is replaced by the tools' JSON. Were it to turn up
# elsewhere in a body (a message quoting it), the body is encoded whole instead.
_MARK = "\x00envgym-tools-" + secrets.token_hex(16)
_MARK_JSON = to_json(_MARK)

# The tools' JSON shared by every session whose env has the same tools: one copy in memory, not one per session.
_INTERNED: dict[bytes, bytes] = {}
_INTERNED_LIMIT = 64

# Below this many bytes of tools' JSON, splicing costs more than encoding them (calculator-v0's 346 bytes:
# 7.8 us whole, 9.2 us spliced; retail-v0's 3.6 kB: 25 us whole, 15 us spliced).
_SPLICE_MIN = 1024


@dataclass
class ToolsJSON:
    """The JSON of the tools list a session last answered with, kept by the list's identity.

    Only for environments whose tools list is never changed in place once handed out (the same promise the info
    deltas rely on, `info_messages_append_only`): a list that is the same object has the same JSON.
    """

    tools: Any = None
    text: bytes = b""

    def encode(self, info: dict[str, Any], encode: Callable[[dict[str, Any]], bytes]) -> bytes:
        """`encode(info)`, byte for byte, with `info["tools"]` written from the cache when it is the same list."""
        tools = info.get("tools")
        if type(tools) is not list:
            return encode(info)
        if tools is not self.tools:
            try:
                text = to_json(tools, inf_nan_mode="strings")
            except PydanticSerializationError:  # numpy values: `encode` converts them
                return encode(info)
            if len(_INTERNED) >= _INTERNED_LIMIT:
                _INTERNED.clear()
            self.tools, self.text = tools, _INTERNED.setdefault(text, text)
        if len(self.text) < _SPLICE_MIN:
            return encode(info)
        head, mark, tail = encode({**info, "tools": _MARK}).partition(_MARK_JSON)
        if not mark or _MARK_JSON in tail:
            return encode(info)
        return head + self.text + tail
