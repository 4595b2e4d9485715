"""Sandboxes: one API (`Sandbox`) over local subprocesses, Docker containers and Kubernetes pods.

from envgym.sandbox import SandboxSpec, create_sandbox
with create_sandbox(SandboxSpec(memory_mb=256), backend="docker") as box:
    box.exec("python3 -c 'print(1)'").stdout
"""

from __future__ import annotations

import importlib

from envgym.sandbox.base import Sandbox, SandboxBackend, current_run_id
from envgym.sandbox.errors import (
    AuthError,
    EnvHostError,
    InvalidRequestError,
    NotFoundError,
    SandboxClosedError,
    SandboxError,
    SandboxUnavailableError,
)
from envgym.sandbox.spec import SandboxSpec
from envgym.sandbox.wire import ExecEvent, ExecResult, SessionResult

# Backends by name -> "module:class". A backend module is imported only when asked for, so the
# docker and kubernetes SDKs stay optional.
BACKENDS = {
    "local": "envgym.sandbox.local:LocalBackend",
    "docker": "envgym.sandbox.docker:DockerBackend",
    "kubernetes": "envgym.sandbox.kubernetes:KubernetesBackend",
}


def get_backend(name: str) -> SandboxBackend:
    """A backend by name (one of `BACKENDS`)."""
    if name not in BACKENDS:
        raise ValueError(f"backend: expected one of {sorted(BACKENDS)}, got {name!r}")
    module, _, cls = BACKENDS[name].partition(":")
    backend: SandboxBackend = getattr(importlib.import_module(module), cls)()
    return backend


def create_sandbox(spec: SandboxSpec | None = None, *, backend: str = "local") -> Sandbox:
    """Start one sandbox. Close it (or use it as a context manager); the reaper catches leaks."""
    return get_backend(backend).create(spec or SandboxSpec())


__all__ = [
    "BACKENDS",
    "AuthError",
    "EnvHostError",
    "ExecEvent",
    "ExecResult",
    "InvalidRequestError",
    "NotFoundError",
    "Sandbox",
    "SandboxBackend",
    "SandboxClosedError",
    "SandboxError",
    "SandboxSpec",
    "SandboxUnavailableError",
    "SessionResult",
    "create_sandbox",
    "current_run_id",
    "get_backend",
]
