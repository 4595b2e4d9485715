"""The asyncio twin of `SandboxClient.request`: one request to a sandbox or env server without blocking the event
loop, with the same request ids, retries of dropped connections and typed errors."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx

from envgym.sandbox.client import raise_for_error
from envgym.sandbox.errors import SandboxUnavailableError

_RETRYABLE = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class AsyncSandboxClient:
    """Talks protocol v1 to one server over TCP from an event loop. Bound to the loop it was first used on (an
    httpx.AsyncClient's connections belong to one loop)."""

    def __init__(self, *, base_url: str, token: str | None = None, timeout_s: float = 30.0, retries: int = 3,
                 max_connections: int = 256) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.retries = retries
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout_s, limits=limits)

    async def request(self, method: str, path: str, *, json_body: Any = None) -> httpx.Response:
        """Send one request, retrying dropped connections with the same request id; raise typed errors."""
        headers = {"X-Request-ID": uuid.uuid4().hex} if method != "GET" else {}
        body = json.dumps(json_body).encode() if json_body is not None else None
        if json_body is not None:
            headers["Content-Type"] = "application/json"
        delay = 0.1
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(method, path, content=body, headers=headers)
                break
            except _RETRYABLE as exc:
                if attempt == self.retries:
                    raise SandboxUnavailableError(f"{method} {self.base_url}{path}: {exc}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            except httpx.TimeoutException as exc:
                raise SandboxUnavailableError(
                    f"{method} {self.base_url}{path}: no answer within {self.timeout_s:g}s") from exc
        raise_for_error(response, f"{method} {path}")
        return response

    async def aclose(self) -> None:
        await self._http.aclose()
