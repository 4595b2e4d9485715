"""A lean HTTP/1.1 client for env servers: one keep-alive TCP connection, a request id per call, one safe retry.

RemoteEnv makes one small request per step, thousands a second from one trainer process, so the client's own CPU
per request is what limits throughput: httpx spent about 1.6 ms of CPU per step here, this client a small fraction
of that. It speaks only what env servers answer (plain http, a Content-Length on every response). A call that
changes state carries an `X-Request-ID`; after a dropped connection it is sent again with the same id, and the
server's replay cache answers it without running it twice.

The socket is a blocking one whose send and receive are bounded by SO_SNDTIMEO / SO_RCVTIMEO: Python's own socket
timeout polls before every send and receive, and each poll hands the GIL over once more, which, with one thread per
session, cost more CPU than the request itself.
"""

from __future__ import annotations

import itertools
import json
import secrets
import socket
import struct
import threading
import time
from urllib.parse import urlsplit

from envgym.sandbox.errors import ERROR_TYPES, SandboxError, SandboxUnavailableError

MAX_HEAD_BYTES = 64 << 10
RETRY_DELAY_S = 0.1


class Dropped(Exception):
    """The connection closed before a whole response arrived."""


def parse_response_head(head: bytes) -> tuple[int, int, bool]:
    """(status, Content-Length, keep-alive) of a response head without its final blank line."""
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        raise Dropped(f"not an HTTP response: {lines[0][:100]!r}") from None
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise Dropped(f"Content-Length: {headers['content-length'][:40]!r} is not a number") from None
    return status, length, headers.get("connection", "").lower() != "close"


def typed_error(status: int, body: bytes, what: str) -> SandboxError:
    """The typed error a server sent in an error body, or a SandboxError naming the status."""
    try:
        error = json.loads(body)["error"]
        return ERROR_TYPES.get(error["type"], SandboxError)(error["message"])
    except (ValueError, KeyError, TypeError):
        return SandboxError(f"{what}: HTTP {status}: {body[:500].decode('utf-8', 'replace')}")


def _timeval(seconds: float) -> bytes:
    """A struct timeval for SO_RCVTIMEO / SO_SNDTIMEO; at least 1 us, since zero means no limit."""
    micros = max(1, round(seconds * 1e6))
    return struct.pack("@ll", micros // 1_000_000, micros % 1_000_000)


class KeepAliveClient:
    """Requests to one `http://host:port` server over a persistent connection; safe to share between threads
    (calls take turns on the one connection)."""

    def __init__(self, url: str, *, token: str | None, timeout_s: float, retries: int = 1) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"url: expected http://HOST:PORT of an env server, got {url!r}")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port or 80
        self.timeout_s = timeout_s
        self.retries = retries
        self._token = token
        self._prefix = parts.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._fixed = f"Host: {host}:{self.port}\r\n" + (f"Authorization: Bearer {token}\r\n" if token else "")
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._buffer = b""
        # Request ids: a random prefix per client and a counter (a uuid4 per call cost a urandom call and an object).
        self._ids = itertools.count()
        self._id_prefix = secrets.token_hex(8)

    def with_port(self, port: int) -> KeepAliveClient:
        """A client of the same host and token on another port (an env server's worker)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return KeepAliveClient(
            f"http://{host}:{port}{self._prefix}", token=self._token, timeout_s=self.timeout_s, retries=self.retries
        )

    def request_bytes(self, method: str, path: str, body: bytes = b"") -> bytes:
        """The whole request: head (with a fresh request id for a call that may change state) and body."""
        request_id = f"X-Request-ID: {self._id_prefix}{next(self._ids):x}\r\n" if method != "GET" else ""
        head = (
            f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._fixed}{request_id}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        return head + body

    def request(self, method: str, path: str, body: bytes = b"") -> bytes:
        """The response body of one request; error statuses raise their typed errors."""
        data = self.request_bytes(method, path, body)
        what = f"{method} {self.url}{path}"
        deadline = time.monotonic() + self.timeout_s
        with self._lock:
            for attempt in range(self.retries + 1):
                reused = self._sock is not None
                try:
                    status, content, keep_alive = self._exchange(data, deadline)
                    break
                except (TimeoutError, BlockingIOError):  # BlockingIOError: SO_RCVTIMEO / SO_SNDTIMEO ran out
                    self._drop()
                    raise SandboxUnavailableError(f"{what}: no answer within {self.timeout_s:g}s") from None
                except (OSError, Dropped) as exc:
                    self._drop()
                    if attempt == self.retries or time.monotonic() + RETRY_DELAY_S >= deadline:
                        raise SandboxUnavailableError(f"{what}: {str(exc) or type(exc).__name__}") from exc
                    if not reused:  # a kept-alive connection the server had closed: resend at once on a new one
                        time.sleep(RETRY_DELAY_S)
            if not keep_alive:
                self._drop()
        if status >= 400:
            raise typed_error(status, content, what)
        return content

    def _exchange(self, data: bytes, deadline: float) -> tuple[int, bytes, bool]:
        sock = self._sock
        if sock is None:
            sock = socket.create_connection((self.host, self.port), timeout=self._left(deadline))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(None)
            self._sock, self._buffer = sock, b""
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(self._left(deadline)))
        sock.sendall(data)
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise Dropped(f"response head over {MAX_HEAD_BYTES} bytes")
            self._receive(sock, deadline)
        status, length, keep_alive = parse_response_head(self._buffer[:end])
        self._buffer = self._buffer[end + 4 :]
        while len(self._buffer) < length:
            self._receive(sock, deadline)
        content, self._buffer = self._buffer[:length], self._buffer[length:]
        return status, content, keep_alive

    def _receive(self, sock: socket.socket, deadline: float) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(self._left(deadline)))
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise Dropped("the server closed the connection")
        self._buffer += chunk

    def _left(self, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    def _drop(self) -> None:
        sock, self._sock, self._buffer = self._sock, None, b""
        if sock is not None:
            sock.close()

    def close(self) -> None:
        with self._lock:
            self._drop()
