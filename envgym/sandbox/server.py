"""The in-sandbox HTTP server (protocol v1): routes, bearer auth, request-id replay, typed errors.

Run inside a sandbox as `python -m envgym.sandbox.server --socket PATH --token-file FILE ...`
(or `--port P`). It exits by itself when its ttl passes or it has been idle too long. Only the
standard library is used for HTTP, so it runs in the minimal sandbox image.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import socketserver
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ValidationError

from envgym.sandbox import files
from envgym.sandbox.errors import AuthError, InvalidRequestError, NotFoundError, SandboxError
from envgym.sandbox.process import ExecDefaults, become_subreaper
from envgym.sandbox.server_env import EnvHost
from envgym.sandbox.service import SandboxService
from envgym.sandbox.wire import (
    EnvCreate,
    EnvReset,
    EnvStep,
    ErrorBody,
    ExecRequest,
    SessionCreate,
    SessionInfo,
    SessionRun,
)

MAX_BODY_BYTES = 256 << 20
M = TypeVar("M", bound=BaseModel)
_REPLAY_SLOTS = 512


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    match: re.Match[str]

    def model(self, cls: type[M]) -> M:
        try:
            return cls.model_validate_json(self.body or b"{}")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise InvalidRequestError(f"{self.path}: {where}: {first['msg']}") from exc

    def param(self, name: str) -> str:
        if name not in self.query:
            raise InvalidRequestError(f"{self.path}: query parameter {name!r} is required")
        return self.query[name]


def _json(model: BaseModel | dict[str, Any], status: int = 200) -> Response:
    body = model.model_dump_json() if isinstance(model, BaseModel) else json.dumps(model)
    return Response(status, body.encode())


Handler = Callable[[Request], Response | Iterator[bytes]]


class Router:
    """Maps (method, path pattern) onto service calls."""

    def __init__(self, service: SandboxService) -> None:
        self.service = service
        self.replay = ReplayCache()
        s = service
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = [
            ("GET", re.compile(r"/v1/health"), lambda r: _json(s.health())),
            ("POST", re.compile(r"/v1/exec"), lambda r: _json(s.exec(r.model(ExecRequest)))),
            ("POST", re.compile(r"/v1/exec/stream"), self._exec_stream),
            ("POST", re.compile(r"/v1/sessions"), self._session_create),
            ("POST", re.compile(r"/v1/sessions/(\w+)/run"), self._session_run),
            ("DELETE", re.compile(r"/v1/sessions/(\w+)"), self._session_close),
            ("GET", re.compile(r"/v1/files"), self._file_read),
            ("PUT", re.compile(r"/v1/files"), self._file_write),
            ("GET", re.compile(r"/v1/archive"), self._archive_get),
            ("PUT", re.compile(r"/v1/archive"), self._archive_put),
            ("POST", re.compile(r"/v1/reset"), self._reset),
            ("POST", re.compile(r"/v1/shutdown"), self._shutdown),
            (
                "POST",
                re.compile(r"/v1/env/sessions"),
                lambda r: _json(self._env().create(r.model(EnvCreate))),
            ),
            ("POST", re.compile(r"/v1/env/sessions/(\w+)/reset"), self._env_reset),
            ("POST", re.compile(r"/v1/env/sessions/(\w+)/step"), self._env_step),
            ("DELETE", re.compile(r"/v1/env/sessions/(\w+)"), self._env_close),
        ]

    def replay_or_run(self, request_id: str, handler: Handler, request: Request) -> Response:
        def compute() -> Response:
            try:
                result = handler(request)
            except SandboxError as exc:
                return _error(exc)
            assert isinstance(result, Response), "streaming routes are never replayed"
            return result

        return self.replay.run(request_id, compute)

    def find(self, method: str, path: str) -> tuple[Handler, re.Match[str]]:
        for route_method, pattern, handler in self.routes:
            match = pattern.fullmatch(path)
            if match and route_method == method:
                return handler, match
        raise NotFoundError(f"no route {method} {path}")

    def _reset(self, r: Request) -> Response:
        self.service.reset()
        return _json({})

    def _shutdown(self, r: Request) -> Response:
        self.service.stopped.set()
        return _json({})

    def _exec_stream(self, r: Request) -> Iterator[bytes]:
        events = self.service.exec_stream(r.model(ExecRequest))
        return (event.model_dump_json(exclude_none=True).encode() + b"\n" for event in events)

    def _session_create(self, r: Request) -> Response:
        self.service.require("sessions")
        req = r.model(SessionCreate)
        return _json(SessionInfo(session_id=self.service.sessions.create(req.cwd, req.env)))

    def _session_run(self, r: Request) -> Response:
        req = r.model(SessionRun)
        return _json(self.service.session_run(r.match.group(1), req.cmd, req.timeout_s, req.max_output_bytes))

    def _session_close(self, r: Request) -> Response:
        self.service.sessions.close(r.match.group(1))
        return _json({})

    def _file_read(self, r: Request) -> Response:
        self.service.require("files")
        data = files.read_file(self.service.defaults.workspace, r.param("path"))
        return Response(200, data, "application/octet-stream")

    def _file_write(self, r: Request) -> Response:
        self.service.require("files")
        mode = int(r.query.get("mode", "644"), 8)
        files.write_file(self.service.defaults.workspace, r.param("path"), r.body, mode)
        return _json({})

    def _archive_get(self, r: Request) -> Response:
        self.service.require("archive")
        return Response(
            200, files.get_archive(self.service.defaults.workspace, r.param("src")), "application/x-tar"
        )

    def _archive_put(self, r: Request) -> Response:
        self.service.require("archive")
        files.put_archive(self.service.defaults.workspace, r.param("dest"), r.body)
        return _json({})

    def _env(self) -> EnvHost:
        self.service.require("env")
        assert self.service.env_host is not None
        return self.service.env_host

    def _env_reset(self, r: Request) -> Response:
        req = r.model(EnvReset)
        return _json(self._env().reset(r.match.group(1), req.seed, req.options))

    def _env_step(self, r: Request) -> Response:
        return _json(self._env().step(r.match.group(1), r.model(EnvStep).action))

    def _env_close(self, r: Request) -> Response:
        self._env().close(r.match.group(1))
        return _json({})


class ReplayCache:
    """Responses by `X-Request-ID`, so a retried request gets the first answer instead of re-running.

    A retry that arrives while the first attempt still runs waits for it.
    """

    def __init__(self, slots: int = _REPLAY_SLOTS) -> None:
        self._slots = slots
        self._lock = threading.Lock()
        self._done: OrderedDict[str, Response] = OrderedDict()
        self._running: dict[str, threading.Event] = {}

    def run(self, request_id: str, compute: Callable[[], Response]) -> Response:
        with self._lock:
            if request_id in self._done:
                return self._done[request_id]
            waiter = self._running.get(request_id)
            if waiter is None:
                self._running[request_id] = threading.Event()
        if waiter is not None:
            waiter.wait()
            return self.run(request_id, compute)
        try:
            response = compute()
            with self._lock:
                self._done[request_id] = response
                while len(self._done) > self._slots:
                    self._done.popitem(last=False)
            return response
        finally:
            with self._lock:
                self._running.pop(request_id).set()


def _error(exc: SandboxError) -> Response:
    body = {"error": ErrorBody(type=exc.type_name, message=str(exc)).model_dump()}
    return Response(exc.status, json.dumps(body).encode())


class SandboxHTTPHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "envgym-sandbox/1"
    router: Router
    token: str | None
    replay: ReplayCache

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged: sandboxes run quietly and their stderr is not read."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise InvalidRequestError(f"body of {length} bytes exceeds the {MAX_BODY_BYTES} byte limit")
            body = self.rfile.read(length) if length else b""
            if split.path != "/v1/health":
                self._authorize()
            handler, match = self.router.find(method, split.path)
            query = {k: v[-1] for k, v in parse_qs(split.query).items()}
            request = Request(method, split.path, query, body, match)
            self.router.service.touch()
            request_id = self.headers.get("X-Request-ID")
            if request_id and method != "GET" and not split.path.endswith("/stream"):
                result: Response | Iterator[bytes] = self.router.replay_or_run(request_id, handler, request)
            else:
                result = handler(request)
        except SandboxError as exc:
            result = _error(exc)
        except Exception as exc:
            result = _error(SandboxError(f"{method} {split.path}: {type(exc).__name__}: {exc}"))
        if isinstance(result, Response):
            self._send(result)
        else:
            self._send_stream(result)

    def _authorize(self) -> None:
        if self.token is None:
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            raise AuthError("Authorization: expected 'Bearer <the sandbox token>'")

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        self.wfile.write(response.body)

    def _send_stream(self, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        except SandboxError as exc:
            line = json.dumps(
                {"type": "error", "error": {"type": exc.type_name, "message": str(exc)}}
            ).encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line) + 1, line + b"\n"))
        self.wfile.write(b"0\r\n\r\n")


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, _ = super().get_request()
        # BaseHTTPRequestHandler expects an (host, port) client address.
        return sock, ("unix", 0)


class _TCPHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def make_http_server(
    service: SandboxService,
    *,
    token: str | None,
    socket_path: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> socketserver.BaseServer:
    """An HTTP server for `service` on a Unix socket (`socket_path`) or TCP (`host`, `port`)."""
    router = Router(service)
    # Without TCP_NODELAY, headers and body in separate writes meet delayed ACKs: ~40 ms per request.
    attrs = {"router": router, "token": token, "disable_nagle_algorithm": socket_path is None}
    handler = type("Handler", (SandboxHTTPHandler,), attrs)
    if socket_path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
        return _UnixHTTPServer(socket_path, handler)
    return _TCPHTTPServer((host, port), handler)


@contextlib.contextmanager
def stop_on_signals(service: SandboxService) -> Iterator[list[str]]:
    """SIGINT and SIGTERM stop `service`, whatever dispositions this process inherited.

    A process started from a non-interactive shell's background job (CI runners, `nohup`, `&`) inherits SIGINT as
    *ignored*, and Python then installs no KeyboardInterrupt handler: relying on the default made `envgym serve`
    deaf to SIGINT under CI. Handlers are installed explicitly (main thread only) and restored on exit; the yielded
    list receives the name of the signal that stopped the service.
    """
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handle(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        service.stopped.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_until_stopped(
    service: SandboxService, server: socketserver.BaseServer, poll_s: float = 0.25
) -> str:
    """Serve until the service is stopped (also by SIGINT/SIGTERM), its ttl passes or it idles out.

    Returns the reason it stopped.
    """
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_s}, daemon=True)
    thread.start()
    reason = "shutdown"
    with stop_on_signals(service) as received:
        while not service.stopped.wait(poll_s):
            expired = service.expired()
            if expired is not None:
                reason = expired
                break
            if service.env_host is not None:
                service.env_host.reap_idle()
            service.processes.reap_orphans()
    if received:
        reason = received[0]
    service.shutdown()
    server.shutdown()
    server.server_close()
    return reason


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m envgym.sandbox.server", description=__doc__)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="listen on this Unix socket path")
    where.add_argument("--port", type=int, help="listen on this TCP port")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--token-file", help="file holding the bearer token (else $ENVGYM_SANDBOX_TOKEN)")
    p.add_argument("--sandbox-id", default=None)
    p.add_argument("--workspace", required=True)
    p.add_argument("--scratch", action="append", default=[], help="directory wiped on reset (repeatable)")
    p.add_argument("--ttl", type=float, default=None)
    p.add_argument("--idle", type=float, default=None)
    p.add_argument("--timeout", type=float, default=60.0, help="default command timeout (s)")
    p.add_argument("--max-output", type=int, default=1 << 20)
    p.add_argument("--rlimits", default="{}", help='JSON {"RLIMIT_AS": bytes, ...} applied to commands')
    p.add_argument("--command-env", default="{}", help="JSON object of environment variables for commands")
    p.add_argument("--env-id", default=None, help="host this gymnasium environment id")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import resource

    args = _parse_args(argv)
    become_subreaper()
    token = os.environ.pop("ENVGYM_SANDBOX_TOKEN", None)
    if args.token_file:
        with open(args.token_file) as fh:
            token = fh.read().strip()
        # Commands in the sandbox run as the same user; once read, the token must not stay readable.
        os.unlink(args.token_file)
    rlimits = {getattr(resource, name): int(value) for name, value in json.loads(args.rlimits).items()}
    service = SandboxService(
        args.sandbox_id or secrets.token_hex(6),
        ExecDefaults(args.workspace, args.timeout, args.max_output, json.loads(args.command_env), rlimits),
        ttl_s=args.ttl,
        idle_s=args.idle,
        env_host=EnvHost(args.env_id),
        scratch=tuple(args.scratch),
    )
    server = make_http_server(
        service, token=token, socket_path=args.socket, host=args.host, port=args.port or 0
    )
    reason = serve_until_stopped(service, server)
    print(f"envgym sandbox server {service.sandbox_id} stopped: {reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
