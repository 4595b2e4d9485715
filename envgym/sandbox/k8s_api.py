"""Talking to the Kubernetes API server: loading credentials, and retrying creates it throttles."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TypeVar

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from envgym.sandbox.errors import SandboxUnavailableError

T = TypeVar("T")
_MAX_RETRY_AFTER_S = 30.0


def load_api_client(context: str | None = None) -> k8s.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig's (current or named) context."""
    try:
        k8s_config.load_incluster_config()
    except k8s_config.ConfigException:
        k8s_config.load_kube_config(context=context)
    return k8s.ApiClient()


def create_with_retry(retry_s: float, what: str, create: Callable[[], T]) -> T:
    """Run `create`, retrying while the API throttles (429, honouring Retry-After) or a quota is full
    (403 exceeded quota), with backoff, for at most `retry_s`; then raise naming the last answer."""
    deadline = time.monotonic() + retry_s
    delay = 0.5
    while True:
        try:
            return create()
        except ApiException as exc:
            if not _retryable(exc):
                raise
            wait = _retry_after(exc) or delay
            if time.monotonic() + wait > deadline:
                raise SandboxUnavailableError(
                    f"creating {what}: the API still answers {exc.status} after {retry_s:g}s of "
                    f"retries: {api_message(exc)}"
                ) from exc
            time.sleep(wait)
            delay = min(delay * 2, 8.0)


def api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


def _retryable(exc: ApiException) -> bool:
    """429 always; 403 only when a quota is exceeded (any other 403 is RBAC, and waiting will not help)."""
    return exc.status == 429 or (exc.status == 403 and "exceeded quota" in api_message(exc))


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After")
    try:
        return min(float(value), _MAX_RETRY_AFTER_S) if value is not None else None
    except ValueError:
        return None
