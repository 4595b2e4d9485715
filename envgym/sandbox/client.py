"""HTTP client of the sandbox server, and `HttpSandbox`, the Sandbox every backend hands out.

Requests that change state carry an `X-Request-ID`, so the client can retry them after a dropped
connection without running them twice. Server errors come back as the typed exceptions in
`envgym.sandbox.errors`.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from envgym.sandbox.base import OPEN_SANDBOXES, Isolation
from envgym.sandbox.errors import ERROR_TYPES, SandboxClosedError, SandboxError, SandboxUnavailableError
from envgym.sandbox.spec import SandboxSpec
from envgym.sandbox.wire import (
    ExecEvent,
    ExecRequest,
    ExecResult,
    Health,
    SessionCreate,
    SessionInfo,
    SessionResult,
    SessionRun,
)

# Extra seconds the HTTP read timeout allows beyond a command's own timeout (kill + drain + transfer).
_TIMEOUT_MARGIN_S = 15.0
_RETRYABLE = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class SandboxClient:
    """Talks protocol v1 to one server, over a Unix socket (`uds`) or TCP (`base_url`)."""

    def __init__(
        self,
        *,
        base_url: str = "http://sandbox",
        uds: str | None = None,
        token: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        diagnose: Callable[[], SandboxError | None] | None = None,
    ) -> None:
        """`diagnose`, when given, is asked why the server cannot be reached; the typed error it returns
        (e.g. out of memory) is raised instead of SandboxUnavailableError."""
        # Plain HTTP (all a Unix socket carries) never uses TLS, and loading the CA bundle for an SSL context it
        # would not use costs ~30 ms per client: a tenth of a container's start.
        transport = httpx.HTTPTransport(uds=uds, verify=base_url.startswith("https://"))
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.retries = retries
        self._diagnose = diagnose
        self._http = httpx.Client(base_url=base_url, transport=transport, headers=headers, timeout=timeout_s)

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        params: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> httpx.Response:
        """Send one request, retrying dropped connections with the same request id; raise typed errors."""
        headers = {"X-Request-ID": uuid.uuid4().hex} if method != "GET" else {}
        body = json.dumps(json_body).encode() if json_body is not None else content
        if json_body is not None:
            headers["Content-Type"] = "application/json"
        delay = 0.1
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(
                    method,
                    path,
                    content=body,
                    params=params,
                    headers=headers,
                    timeout=timeout_s or self.timeout_s,
                )
                break
            except _RETRYABLE as exc:
                if attempt == self.retries:
                    raise self._unavailable(f"{method} {self.base_url}{path}: {exc}") from exc
                # A server that answered before and now refuses or cannot be reached may have died (out of
                # memory): ask why before knocking again (a connect to a vanished pod's address waits seconds).
                # A dropped or cut answer is retried at once, as a live server's hiccup.
                found = self._diagnose() if self._diagnose and isinstance(exc, httpx.ConnectError) else None
                if found is not None:
                    raise found from exc
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            except httpx.TimeoutException as exc:
                raise self._unavailable(
                    f"{method} {self.base_url}{path}: no answer within {timeout_s or self.timeout_s:g}s"
                ) from exc
        raise_for_error(response, f"{method} {path}")
        return response

    def stream(self, path: str, json_body: Any, timeout_s: float) -> Iterator[dict[str, Any]]:
        try:
            with self._http.stream("POST", path, json=json_body, timeout=timeout_s) as response:
                if response.status_code >= 400:
                    response.read()
                    raise_for_error(response, f"POST {path}")
                for line in response.iter_lines():
                    if line:
                        yield json.loads(line)
        except (*_RETRYABLE, httpx.TimeoutException) as exc:
            raise self._unavailable(f"POST {self.base_url}{path}: {exc}") from exc

    def _unavailable(self, message: str) -> SandboxError:
        found = self._diagnose() if self._diagnose is not None else None
        return found if found is not None else SandboxUnavailableError(message)

    def health(self, timeout_s: float | None = None) -> Health:
        return Health.model_validate_json(self.request("GET", "/v1/health", timeout_s=timeout_s).content)

    def probe_health(self, timeout_s: float) -> Health:
        """One health request for a server that may still be starting: no retries and no `diagnose` (the
        caller polls; asking the backend why on every try would cost each try an engine round trip)."""
        try:
            response = self._http.get("/v1/health", timeout=timeout_s)
        except (*_RETRYABLE, httpx.TimeoutException) as exc:
            raise SandboxUnavailableError(f"GET {self.base_url}/v1/health: {exc!r}") from exc
        raise_for_error(response, "GET /v1/health")
        return Health.model_validate_json(response.content)

    def close(self) -> None:
        self._http.close()


def raise_for_error(response: httpx.Response, what: str) -> None:
    """Raise the typed error the server sent (or a SandboxError for an unexpected status)."""
    if response.status_code < 400:
        return
    try:
        error = response.json()["error"]
        cls = ERROR_TYPES.get(error["type"], SandboxError)
        raise cls(error["message"])
    except (ValueError, KeyError, TypeError):
        raise SandboxError(f"{what}: HTTP {response.status_code}: {response.text[:500]}") from None


class HttpShellSession:
    """A persistent shell inside the sandbox; state (cwd, variables) carries over between `run`s."""

    def __init__(self, sandbox: HttpSandbox, session_id: str) -> None:
        self._sandbox = sandbox
        self.session_id = session_id

    def run(self, cmd: str, *, timeout: float | None = None, max_output: int | None = None) -> SessionResult:
        timeout = timeout or self._sandbox.spec.timeout_s
        body = SessionRun(cmd=cmd, timeout_s=timeout, max_output_bytes=max_output).model_dump(
            exclude_none=True
        )
        response = self._sandbox._client().request(
            "POST",
            f"/v1/sessions/{self.session_id}/run",
            json_body=body,
            timeout_s=timeout + _TIMEOUT_MARGIN_S,
        )
        return SessionResult.model_validate_json(response.content)

    def close(self) -> None:
        self._sandbox._client().request("DELETE", f"/v1/sessions/{self.session_id}")


class HttpSandbox:
    """A sandbox reached through its server. `teardown` releases the backend's resources (once)."""

    def __init__(
        self,
        *,
        sandbox_id: str,
        backend: str,
        isolation: Isolation,
        spec: SandboxSpec,
        client: SandboxClient,
        teardown: Callable[[], None],
    ) -> None:
        self.id = sandbox_id
        self.backend = backend
        self.isolation: Isolation = isolation
        self.spec = spec
        self._http: SandboxClient | None = client
        self._teardown = teardown
        self._close_lock = threading.Lock()
        OPEN_SANDBOXES.add(self)

    def __repr__(self) -> str:
        return f"<HttpSandbox {self.id} backend={self.backend} closed={self.closed}>"

    def __enter__(self) -> HttpSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._http is None

    def _client(self) -> SandboxClient:
        client = self._http
        if client is None:
            raise SandboxClosedError(f"sandbox {self.id} is closed")
        return client

    def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        max_output: int | None = None,
    ) -> ExecResult:
        timeout = timeout or self.spec.timeout_s
        req = ExecRequest(
            cmd=cmd,
            cwd=cwd,
            env=env or {},
            stdin=stdin,
            timeout_s=timeout,
            max_output_bytes=max_output or self.spec.max_output_bytes,
        )
        response = self._client().request(
            "POST", "/v1/exec", json_body=req.model_dump(), timeout_s=timeout + _TIMEOUT_MARGIN_S
        )
        return ExecResult.model_validate_json(response.content)

    def exec_stream(self, cmd: str | list[str], *, timeout: float | None = None) -> Iterator[ExecEvent]:
        timeout = timeout or self.spec.timeout_s
        req = ExecRequest(cmd=cmd, timeout_s=timeout, max_output_bytes=self.spec.max_output_bytes)
        for line in self._client().stream("/v1/exec/stream", req.model_dump(), timeout + _TIMEOUT_MARGIN_S):
            if line.get("type") == "error":
                raise ERROR_TYPES.get(line["error"]["type"], SandboxError)(line["error"]["message"])
            yield ExecEvent.model_validate(line)

    def session(self, *, cwd: str | None = None, env: dict[str, str] | None = None) -> HttpShellSession:
        body = SessionCreate(cwd=cwd, env=env or {}).model_dump()
        info = SessionInfo.model_validate_json(
            self._client().request("POST", "/v1/sessions", json_body=body).content
        )
        return HttpShellSession(self, info.session_id)

    def read_file(self, path: str) -> bytes:
        return self._client().request("GET", "/v1/files", params={"path": path}).content

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        content = data.encode() if isinstance(data, str) else data
        self._client().request(
            "PUT", "/v1/files", content=content, params={"path": path, "mode": f"{mode:o}"}
        )

    def env_client(self) -> SandboxClient:
        """The connection to this sandbox's server, for sessions of the environments it hosts:
        `RemoteEnv(..., client=box.env_client())` (see `envgym.sandboxed`). The sandbox owns it and closes it."""
        return self._client()

    def put_archive(self, dest: str, tar: bytes) -> None:
        self._client().request("PUT", "/v1/archive", content=tar, params={"dest": dest})

    def get_archive(self, src: str) -> bytes:
        return self._client().request("GET", "/v1/archive", params={"src": src}).content

    def reset(self) -> None:
        """Kill every process and shell session and empty the workspace (and /tmp in containers)."""
        self._client().request("POST", "/v1/reset")

    def health(self) -> Health:
        return self._client().health()

    def close(self) -> None:
        """Release the sandbox. Safe to call twice, from several threads, and at interpreter exit."""
        with self._close_lock:
            client, self._http = self._http, None
        if client is None:
            return
        OPEN_SANDBOXES.discard(self)
        try:
            client.request("POST", "/v1/shutdown", timeout_s=5)
        except SandboxError:
            pass  # already gone: the teardown below still releases the backend's resources
        finally:
            client.close()
            self._teardown()


def wait_until_healthy(
    client: SandboxClient, deadline_s: float, what: str, alive: Callable[[], bool]
) -> Health:
    """Poll `/v1/health` until the server answers; fail early when `alive()` turns false.

    The first tries come quickly (2 ms apart, doubling to 50 ms): a server started by envgym.sandbox.launch
    listens within milliseconds and then holds the request until it can answer, and any other server is up
    within a poll interval of being ready, not after a retry backoff.
    """
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    pause = 0.002
    while time.monotonic() < end:
        if not alive():
            raise SandboxUnavailableError(f"{what} exited before its server became healthy")
        try:
            return client.probe_health(timeout_s=2.0)
        except SandboxError as exc:
            last = exc
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
    raise SandboxUnavailableError(f"{what}: server not healthy within {deadline_s:g}s ({last})")


def open_sandbox(
    *,
    sandbox_id: str,
    backend: str,
    isolation: Isolation,
    spec: SandboxSpec,
    client: SandboxClient,
    teardown: Callable[[], None],
    alive: Callable[[], bool],
    start_timeout_s: float,
    what: str,
) -> HttpSandbox:
    """Wait for a just-started server, then hand out its sandbox; on failure release everything.

    Every backend ends `create` with this: it started something (process, container, pod) whose
    server will answer at `client`, and knows how to `teardown` it and whether it is still `alive`.
    """
    try:
        wait_until_healthy(client, start_timeout_s, what, alive)
    except Exception:
        client.close()
        teardown()
        raise
    return HttpSandbox(
        sandbox_id=sandbox_id,
        backend=backend,
        isolation=isolation,
        spec=spec,
        client=client,
        teardown=teardown,
    )
