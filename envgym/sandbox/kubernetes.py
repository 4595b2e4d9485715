"""The Kubernetes sandbox backend: one pod per sandbox, made from the envgym-sandbox PodTemplate.

Each pod runs the same sandbox server as the Docker backend and is reached over HTTP at its pod IP (so the
client must run in the cluster network, e.g. in the trainer Job). Leaks are prevented in layers: the server's
ttl/idle exit, the pod's activeDeadlineSeconds, labels + `reap()`, and an owner reference from every pod to a
per-run ConfigMap, so deleting the run (`end_run`) garbage-collects all of its pods.

The bearer token of each pod is a Secret of its own, never a pod env var (an env var stays readable in
/proc/<pid>/environ). The PodTemplate mounts that Secret only into an init container, which copies it into a
memory-backed emptyDir; the server reads it with `--token-file` and unlinks it, so code in the pod finds no
token anywhere once the server is up. Faults the API answers with are handled: a pod that cannot start
(unschedulable, image pull, bad config) fails fast with the reason and frees its start slot, creates that meet
429 or an exceeded quota are retried with backoff for up to `create_retry_s`, a watch whose resourceVersion
is gone (410) lists again, and a run's owner ConfigMap is re-checked before each pod, since another process
may have ended the run.
"""

from __future__ import annotations

import copy
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from envgym.sandbox.base import (
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
    MANAGED_BY,
    current_run_id,
    owner_is_dead,
)
from envgym.sandbox.client import HttpSandbox, SandboxClient, wait_until_healthy
from envgym.sandbox.errors import (
    InvalidRequestError,
    SandboxError,
    SandboxOutOfMemoryError,
    SandboxUnavailableError,
)
from envgym.sandbox.k8s_api import create_with_retry, load_api_client
from envgym.sandbox.k8s_pods import (
    FINISHED,
    PodInfo,
    describe_state,
    pod_body,
    pod_info,
    pod_ip,
    secret_name,
    started,
)
from envgym.sandbox.spec import SandboxSpec

DEFAULT_NAMESPACE = os.environ.get("ENVGYM_K8S_NAMESPACE", "envgym")
"""$ENVGYM_K8S_NAMESPACE (the trainer Job sets it to its own namespace), else `envgym`."""
DEFAULT_TEMPLATE = "envgym-sandbox"
SERVER_PORT = 8888

Doc = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class EnvServer:
    """A placed env server: a RemoteEnv endpoint (`url` + bearer `token`) and the sandbox that owns it."""

    url: str
    token: str
    sandbox: HttpSandbox


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
        create_retry_s: float = 60.0,
    ) -> None:
        """`template` is a PodTemplateSpec (`{"metadata", "spec"}`); when None, the PodTemplate
        `template_name` is read from the namespace on first use. `create_retry_s` bounds how long a create
        is retried while the API answers 429 (too many requests) or 403 exceeded quota."""
        self.namespace = namespace
        self.api_client = api_client or load_api_client()
        self.core = k8s.CoreV1Api(self.api_client)
        self.template_name = template_name
        self.ready_timeout_s = ready_timeout_s
        self.create_retry_s = create_retry_s
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
            info = pod_info(pod, now)
            owner = meta.get("annotations", {}).get(LABEL_OWNER, "")
            if (
                (run_id is not None and labels.get(LABEL_RUN_ID) == run_id)
                or info.phase in FINISHED
                or info.expires_at < now
                or (older_than_s is not None and info.age_s > older_than_s)
                or (orphans and owner and owner_is_dead(owner))
            ):
                self._delete_pod(meta["name"])
                removed.append(info.sandbox_id)
        # The token Secrets of the pods deleted above, by name: the controller may not list Secrets (a list returns
        # their data). A Secret whose pod never started is owned by its run's ConfigMap and goes with it.
        for sandbox_id in removed:
            self._delete_secret(secret_name(sandbox_id))
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
        return [pod_info(p, now) for p in self._list_pods()]

    # -- mechanics ---------------------------------------------------------------------------------------

    def _start(self, spec: SandboxSpec, run_id: str, env_id: str | None) -> tuple[HttpSandbox, str, str]:
        if spec.network != "none":
            raise InvalidRequestError(
                "network: the kubernetes backend gives sandboxes no egress (the namespace NetworkPolicy "
                f'denies it); an allow-list {spec.network} is not supported, use "none"'
            )
        sandbox_id = secrets.token_hex(6)
        token = secrets.token_urlsafe(32)
        owner = self._owner(run_id)
        pod = pod_body(
            self.template(),
            self.template_name,
            self.namespace,
            spec,
            sandbox_id=sandbox_id,
            run_id=run_id,
            env_id=env_id,
            owner=owner,
        )
        name = pod["metadata"]["name"]
        body = k8s.V1Pod.from_dict(pod)
        assert body is not None, "from_dict returns None only for a None input"
        secret = k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(
                name=secret_name(sandbox_id),
                labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_RUN_ID: run_id, LABEL_SANDBOX_ID: sandbox_id},
                owner_references=[k8s.V1OwnerReference(**_snake(owner))],
            ),
            type="Opaque",
            string_data={"token": token},
        )

        def teardown() -> None:
            self._delete_pod(name)
            self._delete_secret(secret_name(sandbox_id))

        with self._starting:
            try:
                create_with_retry(
                    self.create_retry_s,
                    f"secret for pod {name}",
                    lambda: self.core.create_namespaced_secret(self.namespace, secret),
                )
                create_with_retry(
                    self.create_retry_s,
                    f"pod {name}",
                    lambda: self.core.create_namespaced_pod(self.namespace, body),
                )
                pod_ip = self._wait_ready(name)
                url = f"http://{pod_ip}:{SERVER_PORT}"
                http = SandboxClient(
                    base_url=url,
                    token=token,
                    timeout_s=spec.timeout_s + 30,
                    diagnose=lambda: self._why_unreachable(name, spec),
                )
                wait_until_healthy(http, self.ready_timeout_s, f"pod {name}", lambda: True)
            except BaseException:
                teardown()
                raise
        sandbox = HttpSandbox(
            sandbox_id=sandbox_id,
            backend=self.name,
            isolation="pod",
            spec=spec,
            client=http,
            teardown=teardown,
        )
        return sandbox, url, token

    def _why_unreachable(self, name: str, spec: SandboxSpec) -> SandboxError | None:
        """A typed error for a pod whose server stopped answering: out of memory, when the kubelet reports
        its container OOMKilled. The kubelet reports a little after the fact, so this waits up to 5 s for it."""
        deadline = time.monotonic() + 5
        while True:
            try:
                pod = self.core.read_namespaced_pod(name, self.namespace)
            except ApiException:
                return None
            statuses = (pod.status.container_statuses if pod.status else None) or []
            ended = [s.state.terminated for s in statuses if s.state and s.state.terminated]
            if any(t.reason == "OOMKilled" for t in ended):
                return SandboxOutOfMemoryError(
                    f"pod {name} ran out of memory (memory_mb={spec.memory_mb}) and its server was killed"
                )
            if ended or time.monotonic() > deadline:
                return None
            time.sleep(0.25)

    def template(self) -> Doc:
        with self._lock:
            if self._template is None:
                found = self.core.read_namespaced_pod_template(self.template_name, self.namespace)
                self._template = self.api_client.sanitize_for_serialization(found)["template"]
            return copy.deepcopy(self._template)

    def _owner(self, run_id: str) -> Doc:
        """The run's owner ConfigMap as an owner reference: created on first use, found when another process
        made it, and made again when another process ended the run (a pod owned by a deleted object is
        garbage-collected at once). One GET per pod, so a cached uid never outlives its ConfigMap."""
        name = _owner_name(run_id)
        with self._lock:
            cached = self._owners.get(run_id)
        if cached is not None:
            try:
                found = self.api_client.sanitize_for_serialization(
                    self.core.read_namespaced_config_map(name, self.namespace)
                )
                if found["metadata"]["uid"] == cached["uid"]:
                    return cached
            except ApiException as exc:
                if exc.status != 404:
                    raise
        body = k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(
                name=name,
                labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_RUN_ID: run_id},
            ),
            data={"purpose": "owner of this run's sandbox pods; delete it to delete them"},
        )
        try:
            made = create_with_retry(
                self.create_retry_s,
                f"owner ConfigMap {name}",
                lambda: self.core.create_namespaced_config_map(self.namespace, body),
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
            made = self.core.read_namespaced_config_map(name, self.namespace)
        made_meta = self.api_client.sanitize_for_serialization(made)["metadata"]
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": made_meta["name"], "uid": made_meta["uid"]}
        with self._lock:
            self._owners[run_id] = ref
        return ref

    def _wait_ready(self, name: str) -> str:
        """Watch the pod until it is Ready (returns its IP). Fails fast when it finishes, is deleted, or is
        stuck with a reason (unschedulable, image pull, config); lists again when the watch's
        resourceVersion is gone (410); names the last state seen when `ready_timeout_s` passes."""
        deadline = time.monotonic() + self.ready_timeout_s
        selector = f"metadata.name={name}"
        watcher = k8s_watch.Watch()
        version: str | None = None
        last = "no status yet"
        while (left := deadline - time.monotonic()) > 0:
            if version is None:
                listed = self.core.list_namespaced_pod(self.namespace, field_selector=selector)
                version = self.api_client.sanitize_for_serialization(listed)["metadata"]["resourceVersion"]
                if not listed.items:
                    raise SandboxUnavailableError(f"pod {name} was deleted while starting")
                pod = listed.items[0]
                last = describe_state(pod)
                if started(name, pod):
                    return pod_ip(pod)
            try:
                for event in watcher.stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    field_selector=selector,
                    resource_version=version,
                    timeout_seconds=max(1, math.ceil(left)),
                ):
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    if event["type"] == "DELETED":
                        raise SandboxUnavailableError(f"pod {name} was deleted while starting ({last})")
                    last = describe_state(pod)
                    if started(name, pod):
                        watcher.stop()
                        return pod_ip(pod)
            except ApiException as exc:
                if exc.status != 410:
                    raise
                version = None  # the history since our version was compacted: start from a fresh list
        raise SandboxUnavailableError(f"pod {name} not ready within {self.ready_timeout_s:g}s ({last})")

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

    def _delete_secret(self, name: str) -> None:
        try:
            self.core.delete_namespaced_secret(name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _owner_name(run_id: str) -> str:
    return f"envgym-run-{run_id}"


def _snake(ref: Doc) -> dict[str, str]:
    return {"api_version": ref["apiVersion"], "kind": ref["kind"], "name": ref["name"], "uid": ref["uid"]}
