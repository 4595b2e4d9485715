"""Safe retries: the response to a request id is kept, so a retried request gets it instead of running twice.

A request id names one request: its method, path (and so its session), query, body and credentials. The same id
with anything else is a client bug or an attempt to read someone else's answer, and gets 409 Conflict.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from envgym.sandbox.errors import ConflictError
from envgym.sandbox.framing import Response

_SLOTS = 512
_MAX_BYTES = 64 << 20  # exec output can be a megabyte per response; the cache must stay small


@dataclass(frozen=True)
class RequestKey:
    """Which request an `X-Request-ID` was first used for."""

    request_id: str
    credentials: str  # digest of the Authorization header: ids of one client never collide with another's
    fingerprint: str  # digest of method, path, query and body

    @classmethod
    def of(
        cls, request_id: str, authorization: str, method: str, path: str, query: str, body: bytes
    ) -> RequestKey:
        what = hashlib.sha256(b"\0".join([method.encode(), path.encode(), query.encode()]))
        what.update(b"\0" + hashlib.sha256(body).digest())
        return cls(request_id, hashlib.sha256(authorization.encode()).hexdigest(), what.hexdigest())


@dataclass
class _Entry:
    fingerprint: str
    response: Response | None = None  # None while its first attempt runs


class ReplayCache:
    """Responses by request id; a retry that arrives while the first attempt still runs waits for it.

    Retries that wait are rare, so they share one condition (notified when any attempt ends) rather than each
    request making an event of its own: that cost a lock and a condition a request.
    """

    def __init__(self, slots: int = _SLOTS, max_bytes: int = _MAX_BYTES) -> None:
        self._slots = slots
        self._max_bytes = max_bytes
        self._bytes = 0
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        self._waiting = 0  # retries waiting on `_ended`
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def run(self, key: RequestKey, what: str, compute: Callable[[], Response]) -> Response:
        """`compute()` once per key; `what` ("POST /v1/exec") names the request in a conflict."""
        slot = (key.credentials, key.request_id)
        with self._lock:
            while True:
                entry = self._entries.get(slot)
                if entry is None:
                    entry = self._entries[slot] = _Entry(key.fingerprint)
                    break
                if entry.fingerprint != key.fingerprint:
                    raise ConflictError(
                        f"X-Request-ID {key.request_id!r} was already used for another request than {what} "
                        "(another route, session or body); send a fresh id for every new request"
                    )
                if entry.response is not None:
                    return entry.response
                self._waiting += 1  # the first attempt is running; it may also fail and leave the slot free
                try:
                    self._ended.wait()
                finally:
                    self._waiting -= 1
        try:
            response = compute()
        except BaseException:
            with self._lock:
                self._entries.pop(slot, None)
                self._ended.notify_all()
            raise
        with self._lock:
            entry.response = response
            self._bytes += len(response.body)
            self._evict()
            if self._waiting:
                self._ended.notify_all()
        return response

    def _evict(self) -> None:
        """Drop the oldest finished responses beyond the slot and byte budgets (running ones stay)."""
        while len(self._entries) > self._slots or self._bytes > self._max_bytes:
            oldest = next(((slot, e) for slot, e in self._entries.items() if e.response is not None), None)
            if oldest is None:
                return
            slot, entry = oldest
            del self._entries[slot]
            assert entry.response is not None
            self._bytes -= len(entry.response.body)
