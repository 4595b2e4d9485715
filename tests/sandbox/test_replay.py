"""The request-id replay cache: one run per request, conflicts for reused ids, bounded memory."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from envgym.sandbox.errors import ConflictError
from envgym.sandbox.framing import Response
from envgym.sandbox.replay import ReplayCache, RequestKey


def key(request_id: str, body: bytes = b"{}", path: str = "/v1/exec", auth: str = "Bearer t") -> RequestKey:
    return RequestKey.of(request_id, auth, "POST", path, "[]", body)


def test_a_retry_gets_the_first_answer_without_running_again() -> None:
    cache, runs = ReplayCache(), []

    def compute() -> Response:
        runs.append(1)
        return Response(200, b"first")

    assert cache.run(key("a"), "POST /v1/exec", compute).body == b"first"
    assert cache.run(key("a"), "POST /v1/exec", compute).body == b"first"
    assert len(runs) == 1


@pytest.mark.parametrize("other", [key("a", body=b'{"x": 1}'), key("a", path="/v1/sessions")])
def test_the_same_id_for_another_request_is_a_conflict(other: RequestKey) -> None:
    cache = ReplayCache()
    cache.run(key("a"), "POST /v1/exec", lambda: Response(200, b"first"))
    with pytest.raises(ConflictError, match="'a'"):
        cache.run(other, "POST /v1/exec", lambda: Response(200, b"second"))


def test_old_answers_are_dropped_beyond_the_slot_and_byte_budgets() -> None:
    cache = ReplayCache(slots=2, max_bytes=10)
    for name in "abc":
        cache.run(key(name), "POST", lambda: Response(200, b"1234"))
    runs = []
    cache.run(key("a"), "POST", lambda: runs.append(1) or Response(200, b"again"))
    assert runs == [1]  # "a" was evicted, so it ran again
    cache.run(key("big"), "POST", lambda: Response(200, b"x" * 20))
    assert cache.run(key("c"), "POST", lambda: Response(200, b"rerun")).body == b"rerun"


def test_a_running_request_is_never_evicted_and_its_retry_waits_for_it() -> None:
    cache = ReplayCache(slots=1)
    release, started = threading.Event(), threading.Event()

    def slow() -> Response:
        started.set()
        release.wait(10)
        return Response(200, b"slow")

    first = threading.Thread(target=cache.run, args=(key("slow"), "POST", slow))
    first.start()
    started.wait(10)
    cache.run(key("quick"), "POST", lambda: Response(200, b"quick"))
    answers: list[bytes] = []
    retry = threading.Thread(target=lambda: answers.append(cache.run(key("slow"), "POST", slow).body))
    retry.start()
    release.set()
    first.join(10)
    retry.join(10)
    assert answers == [b"slow"]


def test_a_retry_waiting_on_a_first_attempt_that_fails_runs_itself() -> None:
    cache = ReplayCache()
    release, started = threading.Event(), threading.Event()

    def failing() -> Response:
        started.set()
        release.wait(10)
        raise RuntimeError("the first attempt failed")

    def first_attempt() -> None:
        with contextlib.suppress(RuntimeError):
            cache.run(key("k"), "POST", failing)

    first = threading.Thread(target=first_attempt)
    first.start()
    started.wait(10)
    answers: list[bytes] = []
    retry = threading.Thread(target=lambda: answers.append(cache.run(key("k"), "POST", lambda: Response(200, b"2")).body))
    retry.start()
    time.sleep(0.05)  # let the retry reach its wait (the test holds either way: a late retry finds the slot free)
    release.set()
    first.join(10)
    retry.join(10)
    assert answers == [b"2"]
