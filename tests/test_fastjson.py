"""envgym.protocol.fastjson gives exactly what the stock json encoder and decoder give: text, objects and errors."""

from __future__ import annotations

import json
import math
import random
import threading
from typing import Any

import pytest

from envgym.protocol.fastjson import decoder, encoder

OPTIONS: list[dict[str, Any]] = [{}, {"ensure_ascii": False, "default": str},
                                 {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False, "default": str}]


class Odd:
    def __str__(self) -> str:
        return "odd \u00e9"


def values() -> list[Any]:
    rng = random.Random(0)
    out: list[Any] = [
        {}, [], None, True, 0, -1.5, 1e300, "plain", "caf\u00e9 \u2603 \"q\" \\ \n\t\x00", {"order_id": "#W0001"},
        {"a": [1, 2.5, {"b": None}], "\u00e9": "\U0001f600"}, {3: "int key", 2.5: "float key", None: 1, True: 2},
        [math.inf, -math.inf], (1, 2), {"when": Odd()},
    ]
    for _ in range(200):
        out.append({f"k{rng.randrange(50)}": [rng.random(), rng.randrange(-10**12, 10**12), chr(rng.randrange(32, 0x2FFF))]
                    for _ in range(rng.randrange(6))})
    return out


def outcome(encode: Any, value: Any) -> tuple[str, str]:
    try:
        return "ok", encode(value)
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("options", OPTIONS)
def test_encoder_gives_the_stock_text(options: dict[str, Any]) -> None:
    fast, stock = encoder(**options), json.JSONEncoder(**options)
    results = [outcome(fast, value) for value in values()]
    assert results == [outcome(stock.encode, value) for value in values()]
    assert sum(kind == "ok" for kind, _ in results) > 200  # most values encode; the rest fail alike


def test_encoder_errors_are_the_stock_errors_and_leave_no_trace() -> None:
    fast, stock = encoder(), json.JSONEncoder()
    loop: dict[str, Any] = {"x": 1}
    loop["self"] = loop
    for bad in (loop, {"set": {1}}):
        with pytest.raises((ValueError, TypeError)) as fast_error:
            fast(bad)
        with pytest.raises((ValueError, TypeError)) as stock_error:
            stock.encode(bad)
        assert (type(fast_error.value), str(fast_error.value)) == (type(stock_error.value), str(stock_error.value))
    shared = {"a": 1}
    # After a failure the same objects encode again (no stale circular-reference markers).
    assert fast([shared, shared]) == '[{"a": 1}, {"a": 1}]'
    strict = encoder(allow_nan=False)
    with pytest.raises(ValueError, match="Out of range float values"):
        strict({"v": math.nan})
    assert strict({"v": 1.0}) == '{"v": 1.0}'


def test_encoder_is_safe_across_threads() -> None:
    fast = encoder(ensure_ascii=False, default=str)
    shared = {"rows": [{"i": i, "when": Odd()} for i in range(50)]}
    expected = json.JSONEncoder(ensure_ascii=False, default=str).encode(shared)
    problems: list[str] = []

    def work() -> None:
        for _ in range(300):
            text = fast(shared)  # Odd.__str__ runs Python code, so threads switch mid-encode
            if text != expected:
                problems.append(text)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert problems == []


@pytest.mark.parametrize("text", [
    '{"name": "f", "arguments": {"a": 1}}', '  [1, 2.5e3, "x\\u00e9", null, true]  ', '"s"', "12", "\n{}\n",
    "", "   ", "{", '{"a": 1} x', '{"a": 1}{"b": 2}', "[1,]", '{"a" 1}', "NaN", '{"a": "\\ud800"}', "\ufeff{}",
    '{"a": 1}  ', "\t[]", "\r\n1", '[1] ]', "x",
])
def test_decoder_gives_the_stock_objects_and_errors(text: str) -> None:
    fast, stock = decoder(), json.JSONDecoder()
    try:
        expected = stock.decode(text)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError) as fast_error:
            fast(text)
        assert (fast_error.value.msg, fast_error.value.pos) == (exc.msg, exc.pos)
    else:
        got = fast(text)
        assert got == expected or (got != got and expected != expected)
        assert type(got) is type(expected)


def test_decoder_rejects_non_text_like_the_stock_one() -> None:
    with pytest.raises(TypeError):
        decoder()(b"{}")  # type: ignore[arg-type]
