"""How a backend waits for the server it just started: what a cold start spends besides the start itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from envgym.sandbox.client import SandboxClient, wait_until_healthy
from envgym.sandbox.errors import SandboxError, SandboxOutOfMemoryError, SandboxUnavailableError


def test_waiting_for_a_starting_server_never_asks_the_backend_why_it_is_unreachable(tmp_path: Path) -> None:
    # `diagnose` is an engine round trip for docker (inspect + events) and up to 5 s of pod reads for kubernetes;
    # while a server starts, "not answering yet" is expected and must cost no more than the next try.
    diagnosed: list[int] = []

    def diagnose() -> SandboxError | None:
        diagnosed.append(1)
        return None

    client = SandboxClient(uds=str(tmp_path / "server.sock"), diagnose=diagnose)
    tries: list[int] = []

    def alive() -> bool:
        tries.append(1)
        return len(tries) < 4

    with pytest.raises(SandboxUnavailableError, match="exited before its server became healthy"):
        wait_until_healthy(client, 60, "test server", alive)
    assert len(tries) == 4 and diagnosed == []
    client.close()


def test_a_plain_http_client_loads_no_ca_bundle_and_an_https_one_still_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loading the CA bundle took ~30 ms of every sandbox start, for a Unix socket that never carries TLS.
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-bundle.pem"))
    SandboxClient(uds=str(tmp_path / "server.sock")).close()
    SandboxClient(base_url="http://10.0.0.1:8888").close()
    with pytest.raises(OSError):
        SandboxClient(base_url="https://sandbox.example:8888")


def test_a_server_that_cannot_be_reached_is_asked_about_before_any_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pod killed out of memory took ~25 s to surface: 4 connects to its vanished address, then the diagnosis.
    # Once the backend knows why, the first failed connect is enough.
    slept: list[float] = []
    monkeypatch.setattr("envgym.sandbox.client.time.sleep", slept.append)
    dead = SandboxClient(uds=str(tmp_path / "gone.sock"), diagnose=lambda: SandboxOutOfMemoryError("killed"))
    with pytest.raises(SandboxOutOfMemoryError, match="killed"):
        dead.request("POST", "/v1/exec", json_body={})
    assert slept == []
    # Without a diagnosis the client still retries (the server may come back) and ends unavailable.
    asked: list[int] = []
    unknown = SandboxClient(uds=str(tmp_path / "gone.sock"), diagnose=lambda: asked.append(1) or None)  # type: ignore[func-returns-value]
    with pytest.raises(SandboxUnavailableError):
        unknown.request("POST", "/v1/exec", json_body={})
    assert len(slept) == 3 and len(asked) == 4
    dead.close()
    unknown.close()
