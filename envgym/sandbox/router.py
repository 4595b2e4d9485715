"""Protocol v1's routes: bearer auth, the route table of what this server offers, request-id replay.

A server only has the routes of the features its service offers: `envgym serve` has health and env routes and
nothing else, so a client holding an env server's token cannot reach exec, files or archives (they return 404).
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from envgym.sandbox import files
from envgym.sandbox.errors import AuthError, InvalidRequestError, NotFoundError, SandboxError
from envgym.sandbox.framing import RequestHead, Response, error_response
from envgym.sandbox.replay import ReplayCache, RequestKey
from envgym.sandbox.server_env import EnvSessions
from envgym.sandbox.service import SandboxService
from envgym.sandbox.wire import (
    EnvCreate,
    EnvReset,
    EnvStep,
    ExecRequest,
    SessionCreate,
    SessionInfo,
    SessionRun,
)

M = TypeVar("M", bound=BaseModel)


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


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    feature: str | None  # served only when the service offers this feature; None: always
    public: bool = False  # answered without a token (readiness probes)
    inline: bool = False  # cheap: answered on the event loop
    stream: bool = False  # a streamed response, never replayed
    inline_when: Callable[[re.Match[str]], bool] | None = None  # answered on the event loop when this says so


@dataclass
class _Call:
    """An admitted request (see `envgym.sandbox.httpd.Call`)."""

    router: Router
    route: Route
    head: RequestHead
    match: re.Match[str]

    @property
    def inline(self) -> bool:
        when = self.route.inline_when
        return self.route.inline or (when is not None and when(self.match))

    def run(self, body: bytes) -> Response | Iterator[bytes]:
        head, route = self.head, self.route
        request = Request(head.method, head.path, head.query, body, self.match)
        self.router.service.touch()
        request_id = head.headers.get("x-request-id")
        try:
            if request_id and head.method != "GET" and not route.stream:
                query = json.dumps(sorted(head.query.items()))
                key = RequestKey.of(
                    request_id, head.headers.get("authorization", ""), head.method, head.path, query, body
                )
                return self.router.replay.run(key, f"{head.method} {head.path}", lambda: _answer(route, request))
            return route.handler(request)
        except SandboxError as exc:
            return error_response(exc)
        except Exception as exc:
            return error_response(SandboxError(f"{head.method} {head.path}: {type(exc).__name__}: {exc}"))


def _answer(route: Route, request: Request) -> Response:
    try:
        result = route.handler(request)
    except SandboxError as exc:
        return error_response(exc)
    assert isinstance(result, Response), "streaming routes are never replayed"
    return result


class Router:
    """Maps (method, path) onto service calls, for the features `service` offers; `token` None: no auth."""

    def __init__(self, service: SandboxService, token: str | None) -> None:
        self.service = service
        self.replay = ReplayCache()
        self._expected = f"Bearer {token}".encode() if token is not None else None
        s = service

        def route(method: str, pattern: str, handler: Handler, feature: str | None, **flags: Any) -> Route:
            return Route(method, re.compile(pattern), handler, feature, **flags)

        def quick_env(match: re.Match[str]) -> bool:
            return self._env().runs_inline(match.group(1))

        every = [
            route("GET", r"/v1/health", lambda r: _json(s.health()), None, public=True, inline=True),
            route("POST", r"/v1/exec", lambda r: _json(s.exec(r.model(ExecRequest))), "exec"),
            route("POST", r"/v1/exec/stream", self._exec_stream, "exec", stream=True),
            route("POST", r"/v1/reset", self._reset, "exec"),
            route("POST", r"/v1/sessions", self._session_create, "sessions"),
            route("POST", r"/v1/sessions/(\w+)/run", self._session_run, "sessions"),
            route("DELETE", r"/v1/sessions/(\w+)", self._session_close, "sessions"),
            route("GET", r"/v1/files", self._file_read, "files"),
            route("PUT", r"/v1/files", self._file_write, "files"),
            route("GET", r"/v1/archive", self._archive_get, "archive"),
            route("PUT", r"/v1/archive", self._archive_put, "archive"),
            route("POST", r"/v1/shutdown", self._shutdown, "shutdown"),
            route("POST", r"/v1/env/sessions", lambda r: _json(self._env().create(r.model(EnvCreate))), "env"),
            route("POST", r"/v1/env/sessions/(\w+)/reset", self._env_reset, "env", inline_when=quick_env),
            route("POST", r"/v1/env/sessions/(\w+)/step", self._env_step, "env", inline_when=quick_env),
            route("DELETE", r"/v1/env/sessions/(\w+)", self._env_close, "env"),
        ]
        offered = set(service.features())
        self.routes = [r for r in every if r.feature is None or r.feature in offered]

    def admit(self, head: RequestHead) -> _Call:
        """Authorize, then route; both before the body is read. Unknown routes need the token too."""
        found = self._find(head.method, head.path)
        if found is None or not found[0].public:
            self._authorize(head.headers.get("authorization", ""))
        if found is None:
            raise NotFoundError(f"no route {head.method} {head.path}")
        return _Call(self, found[0], head, found[1])

    def _find(self, method: str, path: str) -> tuple[Route, re.Match[str]] | None:
        for r in self.routes:
            match = r.pattern.fullmatch(path)
            if match and r.method == method:
                return r, match
        return None

    def _authorize(self, given: str) -> None:
        if self._expected is not None and not hmac.compare_digest(given.encode(), self._expected):
            raise AuthError("Authorization: expected 'Bearer <the server token>'")

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
        req = r.model(SessionCreate)
        return _json(SessionInfo(session_id=self.service.sessions.create(req.cwd, req.env)))

    def _session_run(self, r: Request) -> Response:
        req = r.model(SessionRun)
        return _json(self.service.session_run(r.match.group(1), req.cmd, req.timeout_s, req.max_output_bytes))

    def _session_close(self, r: Request) -> Response:
        self.service.sessions.close(r.match.group(1))
        return _json({})

    def _file_read(self, r: Request) -> Response:
        data = files.read_file(self.service.defaults.workspace, r.param("path"))
        return Response(200, data, "application/octet-stream")

    def _file_write(self, r: Request) -> Response:
        mode = int(r.query.get("mode", "644"), 8)
        files.write_file(self.service.defaults.workspace, r.param("path"), r.body, mode)
        return _json({})

    def _archive_get(self, r: Request) -> Response:
        return Response(
            200, files.get_archive(self.service.defaults.workspace, r.param("src")), "application/x-tar"
        )

    def _archive_put(self, r: Request) -> Response:
        files.put_archive(self.service.defaults.workspace, r.param("dest"), r.body)
        return _json({})

    def _env(self) -> EnvSessions:
        assert self.service.env_host is not None, "env routes exist only when the service hosts environments"
        return self.service.env_host

    def _env_reset(self, r: Request) -> Response:
        req = r.model(EnvReset)
        return Response(200, self._env().reset(r.match.group(1), req.seed, req.options, req.info_delta))

    def _env_step(self, r: Request) -> Response:
        req = r.model(EnvStep)
        return Response(200, self._env().step(r.match.group(1), req.action, req.held))

    def _env_close(self, r: Request) -> Response:
        self._env().close(r.match.group(1))
        return _json({})
