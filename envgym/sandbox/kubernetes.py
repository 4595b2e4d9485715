"""The Kubernetes sandbox backend: one pod per sandbox, made from the envgym-sandbox PodTemplate.

Each pod runs the same sandbox server as the Docker backend and is reached over HTTP at its pod IP (so the
client must run in the cluster network, e.g. in the trainer Job). Leaks are prevented in layers: the server's
ttl/idle exit, the pod's activeDeadlineSeconds, labels + `reap()`, and an owner reference from every pod to a
per-run ConfigMap, so deleting the run (`end_run`) garbage-collects all of its pods.
"""

from __future__ import annotations

import copy
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from envgym.sandbox.base import (
    LABEL_CREATED_AT,
    LABEL_EXPIRES_AT,
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
    MANAGED_BY,
    current_run_id,
    owner_is_dead,
    sandbox_labels,
)
from envgym.sandbox.client import HttpSandbox, SandboxClient, wait_until_healthy
from envgym.sandbox.errors import InvalidRequestError, SandboxUnavailableError
from envgym.sandbox.spec import SandboxSpec

DEFAULT_NAMESPACE = os.environ.get("ENVGYM_K8S_NAMESPACE", "envgym")
"""$ENVGYM_K8S_NAMESPACE (the trainer Job sets it to its own namespace), else `envgym`."""
DEFAULT_TEMPLATE = "envgym-sandbox"
SERVER_PORT = 8888
TOKEN_ENV = "ENVGYM_SANDBOX_TOKEN"
# The pod deadline backs up the server's own ttl exit, so it fires a little later.
_DEADLINE_MARGIN_S = 30
_FINISHED = ("Succeeded", "Failed")

Doc = dict[str, Any]


@dataclass(frozen=True)
class PodInfo:
    """What `status` and `reap` report about one sandbox pod."""

    name: str
    sandbox_id: str
    run_id: str
    phase: str
    ready: bool
    age_s: float
    expires_at: float


@dataclass(frozen=True)
class EnvServer:
    """A placed env server: a RemoteEnv endpoint (`url` + bearer `token`) and the sandbox that owns it."""

    url: str
    token: str
    sandbox: HttpSandbox


def load_api_client(context: str | None = None) -> k8s.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig's (current or named) context."""
    try:
        k8s_config.load_incluster_config()
    except k8s_config.ConfigException:
        k8s_config.load_kube_config(context=context)
    return k8s.ApiClient()


class KubernetesBackend:
    """Creates sandbox pods in one namespace. Thread-safe; `max_starting` bounds pods starting at once."""

    name = "kubernetes"
    isolation = "pod"

    def __init__(
        self,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        api_client: k8s.ApiClient | None = None,
        template: Doc | None = None,
        template_name: str = DEFAULT_TEMPLATE,
        max_starting: int = 8,
        ready_timeout_s: float = 180.0,
    ) -> None:
        """`template` is a PodTemplateSpec (`{"metadata", "spec"}`); when None, the PodTemplate
        `template_name` is read from the namespace on first use."""
        self.namespace = namespace
        self.api_client = api_client or load_api_client()
        self.core = k8s.CoreV1Api(self.api_client)
        self.template_name = template_name
        self.ready_timeout_s = ready_timeout_s
        self._template = copy.deepcopy(template) if template is not None else None
        self._starting = threading.BoundedSemaphore(max_starting)
        self._owners: dict[str, Doc] = {}
        self._lock = threading.Lock()

    # -- Sandbox API -------------------------------------------------------------------------------------

    def create(self, spec: SandboxSpec, *, run_id: str | None = None) -> HttpSandbox:
        """Create a pod for `spec`, wait until its server is ready, and return a sandbox talking to it."""
        return self._start(spec, run_id or current_run_id(), env_id=None)[0]

    def place_env_servers(
        self, env_id: str, count: int, spec: SandboxSpec | None = None, *, run_id: str | None = None
    ) -> list[EnvServer]:
        """Start `count` pods hosting gymnasium env `env_id` (RemoteEnv endpoints for rollouts), in parallel
        up to `max_starting` at a time. On any failure the ones already placed are closed."""
        spec = spec or SandboxSpec.model_validate({})
        results: list[EnvServer | BaseException] = [RuntimeError("not started")] * count

        def place(i: int) -> None:
            try:
                sandbox, url, token = self._start(spec, run_id or current_run_id(), env_id=env_id)
                results[i] = EnvServer(url=url, token=token, sandbox=sandbox)
            except BaseException as exc:
                results[i] = exc

        threads = [threading.Thread(target=place, args=(i,), daemon=True) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        placed = [r for r in results if isinstance(r, EnvServer)]
        failures = [r for r in results if not isinstance(r, EnvServer)]
        if failures:
            for server in placed:
                server.sandbox.close()
            raise failures[0]
        return placed

    def reap(
        self, *, run_id: str | None = None, orphans: bool = True, older_than_s: float | None = None
    ) -> list[str]:
        """Delete sandbox pods that are finished, expired, older than `older_than_s`, of `run_id` (all of
        them), or (with `orphans`) whose owner process on this host is gone. Returns the sandbox ids."""
        now = time.time()
        removed: list[str] = []
        for pod in self._list_pods():
            meta = pod["metadata"]
            labels = meta.get("labels", {})
            info = _pod_info(pod, now)
            owner = meta.get("annotations", {}).get(LABEL_OWNER, "")
            if (
                (run_id is not None and labels.get(LABEL_RUN_ID) == run_id)
                or info.phase in _FINISHED
                or info.expires_at < now
                or (older_than_s is not None and info.age_s > older_than_s)
                or (orphans and owner and owner_is_dead(owner))
            ):
                self._delete_pod(meta["name"])
                removed.append(info.sandbox_id)
        if run_id is not None:
            self.end_run(run_id)
        return removed

    def end_run(self, run_id: str) -> None:
        """Delete the run's owner ConfigMap; the garbage collector then deletes every pod it owns."""
        with self._lock:
            self._owners.pop(run_id, None)
        try:
            self.core.delete_namespaced_config_map(
                _owner_name(run_id), self.namespace, body=k8s.V1DeleteOptions(propagation_policy="Background")
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def list_sandboxes(self) -> list[PodInfo]:
        now = time.time()
        return [_pod_info(p, now) for p in self._list_pods()]

    # -- mechanics ---------------------------------------------------------------------------------------

    def _start(self, spec: SandboxSpec, run_id: str, env_id: str | None) -> tuple[HttpSandbox, str, str]:
        if spec.network != "none":
            raise InvalidRequestError(
                "network: the kubernetes backend gives sandboxes no egress (the namespace NetworkPolicy "
                f'denies it); an allow-list {spec.network} is not supported, use "none"'
            )
        sandbox_id = secrets.token_hex(6)
        token = secrets.token_urlsafe(32)
        pod = self._pod_body(spec, sandbox_id, run_id, token, env_id)
        name = pod["metadata"]["name"]
        body = k8s.V1Pod.from_dict(pod)
        assert body is not None, "from_dict returns None only for a None input"
        with self._starting:
            self.core.create_namespaced_pod(self.namespace, body)
            try:
                pod_ip = self._wait_ready(name)
                url = f"http://{pod_ip}:{SERVER_PORT}"
                http = SandboxClient(base_url=url, token=token, timeout_s=spec.timeout_s + 30)
                wait_until_healthy(http, self.ready_timeout_s, f"pod {name}", lambda: True)
            except BaseException:
                self._delete_pod(name)
                raise
        sandbox = HttpSandbox(
            sandbox_id=sandbox_id,
            backend=self.name,
            isolation="pod",
            spec=spec,
            client=http,
            teardown=lambda: self._delete_pod(name),
        )
        return sandbox, url, token

    def template(self) -> Doc:
        with self._lock:
            if self._template is None:
                found = self.core.read_namespaced_pod_template(self.template_name, self.namespace)
                self._template = self.api_client.sanitize_for_serialization(found)["template"]
            return copy.deepcopy(self._template)

    def _owner(self, run_id: str) -> Doc:
        """The run's owner ConfigMap, created on first use (or found, when another process made it)."""
        with self._lock:
            if run_id in self._owners:
                return self._owners[run_id]
        body = k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(
                name=_owner_name(run_id),
                labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_RUN_ID: run_id},
            ),
            data={"purpose": "owner of this run's sandbox pods; delete it to delete them"},
        )
        try:
            made = self.core.create_namespaced_config_map(self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            made = self.core.read_namespaced_config_map(_owner_name(run_id), self.namespace)
        made_meta = self.api_client.sanitize_for_serialization(made)["metadata"]
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": made_meta["name"], "uid": made_meta["uid"]}
        with self._lock:
            self._owners[run_id] = ref
        return ref

    def _pod_body(
        self, spec: SandboxSpec, sandbox_id: str, run_id: str, token: str, env_id: str | None
    ) -> Doc:
        template = self.template()
        labels = sandbox_labels(spec, sandbox_id, run_id)
        owner = labels.pop(LABEL_OWNER)  # host:pid is not a valid label value
        meta = template.get("metadata", {})
        pod_spec = template["spec"]
        pod_spec["activeDeadlineSeconds"] = math.ceil(spec.ttl_s) + _DEADLINE_MARGIN_S
        container = pod_spec["containers"][0]
        if "image" in spec.model_fields_set:
            container["image"] = spec.image
        args = [
            *container.get("args", []),
            "--sandbox-id",
            sandbox_id,
            "--ttl",
            f"{spec.ttl_s:g}",
            "--timeout",
            f"{spec.timeout_s:g}",
            "--max-output",
            str(spec.max_output_bytes),
        ]
        if spec.idle_s is not None and env_id is None:
            args += ["--idle", f"{spec.idle_s:g}"]
        if env_id is not None:
            args += ["--env-id", env_id]
        container["args"] = args
        container["env"] = [
            *container.get("env", []),
            *({"name": k, "value": v} for k, v in sorted(spec.env.items())),
            {"name": TOKEN_ENV, "value": token},
        ]
        _apply_limits(container, spec)
        for volume in pod_spec.get("volumes", []):
            if "emptyDir" in volume:
                volume["emptyDir"]["sizeLimit"] = f"{spec.disk_mb}Mi"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"envgym-sbx-{sandbox_id}",
                "namespace": self.namespace,
                "labels": {**meta.get("labels", {}), **labels},
                "annotations": {**meta.get("annotations", {}), LABEL_OWNER: owner},
                "ownerReferences": [self._owner(run_id)],
            },
            "spec": pod_spec,
        }

    def _wait_ready(self, name: str) -> str:
        """Watch the pod until it is Ready (returns its IP); fail fast if it finishes or times out."""
        deadline = time.monotonic() + self.ready_timeout_s
        watcher = k8s_watch.Watch()
        while time.monotonic() < deadline:
            remaining = max(1, int(deadline - time.monotonic()))
            for event in watcher.stream(
                self.core.list_namespaced_pod,
                self.namespace,
                field_selector=f"metadata.name={name}",
                timeout_seconds=remaining,
            ):
                pod = event["object"]
                if event["type"] == "DELETED":
                    raise SandboxUnavailableError(f"pod {name} was deleted while starting")
                phase = pod.status.phase if pod.status else None
                if phase in _FINISHED:
                    raise SandboxUnavailableError(f"pod {name} {phase} before it became ready: {_why(pod)}")
                if _is_ready(pod) and pod.status.pod_ip:
                    watcher.stop()
                    return str(pod.status.pod_ip)
        raise SandboxUnavailableError(f"pod {name} not ready within {self.ready_timeout_s:g}s")

    def _list_pods(self) -> list[Doc]:
        found = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        )
        return [self.api_client.sanitize_for_serialization(p) for p in found.items]

    def _delete_pod(self, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _owner_name(run_id: str) -> str:
    return f"envgym-run-{run_id}"


def _apply_limits(container: Doc, spec: SandboxSpec) -> None:
    """Limits from the spec; requests from the template, capped at the limits."""
    limits = {
        "cpu": f"{round(spec.cpu * 1000)}m",
        "memory": f"{spec.memory_mb}Mi",
        "ephemeral-storage": f"{2 * spec.disk_mb}Mi",
    }
    resources = container.setdefault("resources", {})
    requests = resources.get("requests", {})
    resources["limits"] = limits
    resources["requests"] = {k: _smaller(v, limits[k]) if k in limits else v for k, v in requests.items()}


_SUFFIX = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}


def _quantity(value: str) -> float:
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * _SUFFIX[suffix]
    return float(value)


def _smaller(a: str, b: str) -> str:
    return a if _quantity(a) <= _quantity(b) else b


def _is_ready(pod: k8s.V1Pod) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _why(pod: k8s.V1Pod) -> str:
    status = pod.status
    reason = f"{status.reason or ''} {status.message or ''}".strip() if status else ""
    return reason or "no reason given"


def _pod_info(pod: Doc, now: float) -> PodInfo:
    meta = pod["metadata"]
    labels = meta.get("labels", {})
    status = pod.get("status", {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
    created = float(labels.get(LABEL_CREATED_AT, now))
    return PodInfo(
        name=meta["name"],
        sandbox_id=labels.get(LABEL_SANDBOX_ID, meta["name"]),
        run_id=labels.get(LABEL_RUN_ID, ""),
        phase=status.get("phase", "Unknown"),
        ready=ready,
        age_s=now - created,
        expires_at=float(labels.get(LABEL_EXPIRES_AT, math.inf)),
    )
