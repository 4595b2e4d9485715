"""A stateful fake of the Kubernetes API for tests: it is NOT a cluster and must never be presented as one.

It speaks the real REST API over HTTP (the subset envgym's backend and CLI use: pods with label/field
selectors, watch and logs; configmaps; secrets; podtemplates; ownerReference garbage collection, including
of an object created with an owner that no longer exists) so the real `kubernetes` client talks to it
unchanged. Its "kubelet" runs each pod as real Docker containers from the pod spec (init containers to
completion, then the container: image, command/args, env, user, read-only root, dropped capabilities,
no-new-privileges, cpu and memory limits, emptyDir volumes as size-limited tmpfs shared between the pod's
containers, Secret volumes as read-only files with their mode), probes readiness over HTTP, enforces
activeDeadlineSeconds and reports container exits as pod phases. All pods share one `internal` Docker
network, which stands in for the deny-all-egress NetworkPolicy (NetworkPolicy objects themselves are not
interpreted).

Faults a real cluster produces, which the backend must survive: a pod whose image the node does not have stays
Pending with `ErrImagePull`; a pod whose requests exceed the one node's cpu or memory stays Pending,
`Unschedulable`; `quota` answers 403 exceeded quota on pod creates; `throttle()` answers 429 with Retry-After;
`expired_watches` makes watches that resume from a resourceVersion answer 410 Gone (history compacted).
Not implemented: real scheduling, admission beyond the pod-count quota, RBAC, Pod Security,
ephemeral-storage.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import docker
import docker.errors

Doc = dict[str, Any]
FAKE_LABEL = "envgym-fake-k8s"
NETWORK = "envgym-fake-k8s"
_PATH = re.compile(
    r"^/api/v1/namespaces/([^/]+)/(pods|configmaps|secrets|podtemplates)(?:/([^/]+))?(?:/(log))?$"
)
_KINDS = {"pods": "Pod", "configmaps": "ConfigMap", "secrets": "Secret", "podtemplates": "PodTemplate"}
_SUFFIX = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity(value: str) -> float:
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * _SUFFIX[suffix]
    return float(value)


def _status(code: int, reason: str, message: str) -> Doc:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality-based label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated (AND)."""
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _fields_match(selector: str | None, obj: Doc) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, value = term.split("=", 1)
        node: Any = obj
        for part in key.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if node != value:
            return False
    return True


@dataclass
class _Event:
    rv: int
    resource: str
    namespace: str
    type: str
    obj: Doc


@dataclass
class FakeCluster:
    """The object store, its event log, and the Docker-backed kubelet."""

    docker_client: docker.DockerClient
    objects: dict[tuple[str, str, str], Doc] = field(default_factory=dict)
    events: list[_Event] = field(default_factory=list)
    rv: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)
    max_starting_seen: int = 0
    quota: dict[str, int] = field(default_factory=dict)
    """Hard pod-count quota per namespace (`{"envgym-dev": 2}`): creates beyond it answer 403."""
    expired_watches: int = 0
    """The next this many watches that resume from a resourceVersion get 410 Gone (Expired), as when etcd
    compacted its history past that version between the client's list and its watch."""
    gone_served: int = 0
    throttled_served: int = 0
    _throttle: list[float] = field(default_factory=list)
    _starting: set[str] = field(default_factory=set)
    _pod_dirs: dict[tuple[str, str], str] = field(default_factory=dict)

    def throttle(self, count: int, retry_after_s: float) -> None:
        """Answer the next `count` creates with 429 Too Many Requests and `Retry-After: retry_after_s`."""
        with self.changed:
            self._throttle.extend([retry_after_s] * count)

    def admit(self, resource: str, namespace: str) -> tuple[int, Doc, dict[str, str]] | None:
        """Priority-and-fairness and quota admission for a create: an error answer, or None to go on."""
        with self.changed:
            if self._throttle:
                wait = self._throttle.pop(0)
                self.throttled_served += 1
                message = "Too many requests, please try again later."
                return 429, _status(429, "TooManyRequests", message), {"Retry-After": f"{wait:g}"}
            limit = self.quota.get(namespace)
            if resource == "pods" and limit is not None:
                used = sum(
                    1
                    for (r, ns, _), o in self.objects.items()
                    if r == "pods" and ns == namespace and o["status"]["phase"] not in ("Succeeded", "Failed")
                )
                if used >= limit:
                    message = (
                        f"pods is forbidden: exceeded quota: envgym-quota, requested: pods=1, "
                        f"used: pods={used}, limited: pods={limit}"
                    )
                    return 403, _status(403, "Forbidden", message), {}
        return None

    # -- store -------------------------------------------------------------------------------------------

    def _record(self, resource: str, namespace: str, kind: str, obj: Doc) -> None:
        """Caller holds `changed`."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append(_Event(self.rv, resource, namespace, kind, json.loads(json.dumps(obj))))
        self.changed.notify_all()

    def create(self, resource: str, namespace: str, body: Doc) -> tuple[int, Doc]:
        name = body.get("metadata", {}).get("name")
        if not name:
            return 422, _status(422, "Invalid", f"{resource}: metadata.name is required")
        with self.changed:
            if (resource, namespace, name) in self.objects:
                return 409, _status(409, "AlreadyExists", f'{resource} "{name}" already exists')
            body["apiVersion"], body["kind"] = "v1", _KINDS[resource]
            if resource == "secrets":
                data = body.setdefault("data", {})
                for key, value in body.pop("stringData", {}).items():
                    data[key] = base64.b64encode(value.encode()).decode()
            meta = body["metadata"]
            meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now())
            if resource == "pods":
                body["status"] = {
                    "phase": "Pending",
                    "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": _now()}],
                }
                self._starting.add(name)
                self.max_starting_seen = max(self.max_starting_seen, len(self._starting))
            self.objects[(resource, namespace, name)] = body
            self._record(resource, namespace, "ADDED", body)
            snapshot = json.loads(json.dumps(body))
            owners = {ref.get("uid") for ref in meta.get("ownerReferences", [])}
            live = {o["metadata"]["uid"] for (_, ns, _), o in self.objects.items() if ns == namespace}
            dangling = bool(owners) and not owners & live
        if dangling:
            # The garbage collector deletes an object none of whose owners exist, soon after it is created.
            threading.Timer(0.2, self.delete, args=(resource, namespace, name)).start()
        if resource == "pods":
            threading.Thread(target=self._kubelet, args=(namespace, name), daemon=True).start()
        return 201, snapshot

    def get(self, resource: str, namespace: str, name: str) -> Doc | None:
        with self.changed:
            obj = self.objects.get((resource, namespace, name))
            return json.loads(json.dumps(obj)) if obj else None

    def list_objects(self, resource: str, namespace: str, labels: str | None, fields: str | None) -> Doc:
        with self.changed:
            items = [
                json.loads(json.dumps(o))
                for (r, ns, _), o in self.objects.items()
                if r == resource
                and ns == namespace
                and selector_matches(labels, o["metadata"].get("labels", {}))
                and _fields_match(fields, o)
            ]
            rv = str(self.rv)
        return {
            "apiVersion": "v1",
            "kind": f"{_KINDS[resource]}List",
            "metadata": {"resourceVersion": rv},
            "items": items,
        }

    def delete(self, resource: str, namespace: str, name: str) -> Doc | None:
        with self.changed:
            obj = self.objects.pop((resource, namespace, name), None)
            if obj is None:
                return None
            self._starting.discard(name)
            self._record(resource, namespace, "DELETED", obj)
            uid = obj["metadata"]["uid"]
            dependents = [
                (r, ns, n)
                for (r, ns, n), o in self.objects.items()
                if ns == namespace
                and any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences", []))
            ]
        if resource == "pods":
            self._remove_container(namespace, name)
        # The garbage collector: background propagation deletes whatever the object owned.
        for dep in dependents:
            self.delete(*dep)
        return obj

    def _update_pod(self, namespace: str, name: str, **status: Any) -> bool:
        with self.changed:
            pod = self.objects.get(("pods", namespace, name))
            if pod is None:
                return False
            ready = status.pop("ready", None)
            pod["status"].update(status)
            if ready is not None:
                pod["status"]["conditions"] = [
                    {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": _now()}
                ]
                if ready:
                    self._starting.discard(name)
            if pod["status"]["phase"] in ("Succeeded", "Failed"):
                self._starting.discard(name)
            self._record("pods", namespace, "MODIFIED", pod)
            return True

    # -- watch -------------------------------------------------------------------------------------------

    def watch(
        self,
        resource: str,
        namespace: str,
        labels: str | None,
        fields: str | None,
        since: int | None,
        timeout_s: float,
    ) -> Any:
        """Yield watch events: the current objects as ADDED (when no resourceVersion), then changes."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            if since is not None and self.expired_watches > 0:
                self.expired_watches -= 1
                self.gone_served += 1
                message = f"too old resource version: {since} ({self.rv + 1})"
                yield {"type": "ERROR", "object": _status(410, "Expired", message)}
                return
        if since is None:
            listed = self.list_objects(resource, namespace, labels, fields)
            since = int(listed["metadata"]["resourceVersion"])
            for obj in listed["items"]:
                yield {"type": "ADDED", "object": obj}
        while True:
            with self.changed:
                pending = [e for e in self.events if e.rv > since]
                if not pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self.changed.wait(min(left, 0.5))
                    continue
            for event in pending:
                since = event.rv
                if (
                    event.resource == resource
                    and event.namespace == namespace
                    and selector_matches(labels, event.obj["metadata"].get("labels", {}))
                    and _fields_match(fields, event.obj)
                ):
                    yield {"type": event.type, "object": event.obj}

    # -- the kubelet -------------------------------------------------------------------------------------

    def _container_name(self, namespace: str, name: str) -> str:
        return f"{FAKE_LABEL}-{namespace}-{name}"

    def _kubelet(self, namespace: str, name: str) -> None:
        pod = self.get("pods", namespace, name)
        if pod is None:
            return
        unschedulable = self._unschedulable(pod["spec"])
        if unschedulable is not None:
            condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            condition.update(message=unschedulable, lastTransitionTime=_now())
            self._update_pod(namespace, name, conditions=[condition])
            return
        missing = self._missing_image(pod["spec"])
        if missing is not None:
            image, container_name = missing
            waiting = {"reason": "ErrImagePull", "message": f'failed to pull image "{image}": not found'}
            status = {
                "name": container_name,
                "image": image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
            }
            self._update_pod(namespace, name, containerStatuses=[{**status, "state": {"waiting": waiting}}])
            return
        try:
            for init in pod["spec"].get("initContainers", []):
                code = self._run_container(namespace, pod, init).wait()["StatusCode"]
                if code != 0:
                    self._update_pod(
                        namespace,
                        name,
                        phase="Failed",
                        reason="InitError",
                        message=f"{init['name']}: exit {code}",
                    )
                    return
            container = self._run_container(namespace, pod, pod["spec"]["containers"][0])
        except docker.errors.DockerException as exc:
            self._update_pod(namespace, name, phase="Failed", reason="ContainerCreateError", message=str(exc))
            return
        started = time.monotonic()
        container.reload()
        ip = container.attrs["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
        if not self._update_pod(namespace, name, phase="Running", podIP=ip, startTime=_now()):
            self._remove_container(namespace, name)  # deleted while its container was being created
            return
        spec = pod["spec"]
        c = spec["containers"][0]
        probe = c.get("readinessProbe", {}).get("httpGet")
        period = c.get("readinessProbe", {}).get("periodSeconds", 10)
        deadline = spec.get("activeDeadlineSeconds")
        ready = False
        while self.get("pods", namespace, name) is not None:
            container.reload()
            if container.status in ("exited", "dead"):
                state = container.attrs["State"]
                code = state["ExitCode"]
                why = "OOMKilled" if state.get("OOMKilled") else "Completed" if code == 0 else "Error"
                main = {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                }
                self._update_pod(
                    namespace,
                    name,
                    phase="Succeeded" if code == 0 else "Failed",
                    ready=False,
                    reason="Completed" if code == 0 else "Error",
                    message=f"exit code {code}",
                    containerStatuses=[{**main, "state": {"terminated": {"exitCode": code, "reason": why}}}],
                )
                return
            if deadline is not None and time.monotonic() - started > deadline:
                with contextlib.suppress(docker.errors.DockerException):
                    container.kill()
                self._update_pod(
                    namespace,
                    name,
                    phase="Failed",
                    ready=False,
                    reason="DeadlineExceeded",
                    message=f"Pod was active on the node longer than the specified deadline ({deadline}s)",
                )
                return
            now_ready = probe is None or self._probe(ip, probe, c.get("ports", []))
            if now_ready != ready:
                ready = now_ready
                self._update_pod(namespace, name, ready=ready)
            time.sleep(min(period, 0.2) if not ready else min(period, 1.0))

    def _probe(self, ip: str, probe: Doc, ports: list[Doc]) -> bool:
        port = probe["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in ports if p.get("name") == port)
        try:
            with urllib.request.urlopen(f"http://{ip}:{port}{probe.get('path', '/')}", timeout=1) as r:
                return bool(200 <= r.status < 400)
        except OSError:
            return False

    def _unschedulable(self, spec: Doc) -> str | None:
        """The scheduler's message when the pod's requests exceed what the one node (this machine) has."""
        node = {
            "cpu": float(os.cpu_count() or 1),
            "memory": float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")),
        }
        for resource, capacity in node.items():
            wanted = sum(
                _quantity(c.get("resources", {}).get("requests", {}).get(resource, "0"))
                for c in spec["containers"]
            )
            if wanted > capacity:
                return f"0/1 nodes are available: 1 Insufficient {resource}."
        return None

    def _missing_image(self, spec: Doc) -> tuple[str, str] | None:
        for c in spec.get("initContainers", []) + spec["containers"]:
            try:
                self.docker_client.images.get(c["image"])
            except docker.errors.ImageNotFound:
                return c["image"], c["name"]
        return None

    def _volume_name(self, namespace: str, pod: str, volume: str) -> str:
        return f"{FAKE_LABEL}-{namespace}-{pod}-{volume}"

    def _mounts(
        self, namespace: str, pod: Doc, c: Doc, uid: int | None, fs_group: int | None
    ) -> tuple[dict[str, Doc], dict[str, str]]:
        """(bind mounts, tmpfs mounts) for the container's volumeMounts. An emptyDir only this container
        mounts is a size-limited tmpfs; one the pod's containers share (init -> main) is a host directory,
        since a Docker tmpfs does not outlive the container. Secrets are read-only files whose mode is the
        volume's defaultMode, plus group read with an fsGroup, as the kubelet makes them."""
        pod_name = pod["metadata"]["name"]
        spec = pod["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        users: dict[str, int] = {}
        for other in spec.get("initContainers", []) + spec["containers"]:
            for mount in other.get("volumeMounts", []):
                users[mount["name"]] = users.get(mount["name"], 0) + 1
        binds: dict[str, Doc] = {}
        tmpfs: dict[str, str] = {}
        for mount in c.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "emptyDir" in volume and users[mount["name"]] == 1:
                size = int(_quantity(volume["emptyDir"].get("sizeLimit", "64Mi")))
                tmpfs[mount["mountPath"]] = f"size={size},uid={uid or 0},gid={fs_group or 0},mode=0770"
            elif "emptyDir" in volume:
                directory = self._pod_dir(namespace, pod_name, volume["name"], 0o770, uid, fs_group)
                binds[directory] = {"bind": mount["mountPath"], "mode": "rw"}
            elif "secret" in volume:
                directory = self._pod_dir(namespace, pod_name, volume["name"], 0o755, 0, 0)
                self._write_secret(namespace, volume["secret"], directory, fs_group)
                binds[directory] = {"bind": mount["mountPath"], "mode": "ro"}
            else:
                raise docker.errors.DockerException(
                    f"volume {mount['name']}: the fake supports emptyDir and secret"
                )
        return binds, tmpfs

    def _pod_dir(
        self, namespace: str, pod: str, volume: str, mode: int, uid: int | None, gid: int | None
    ) -> str:
        """The host directory backing one of a pod's volumes, made on first use."""
        with self.changed:
            key = (namespace, f"{pod}/{volume}")
            if key not in self._pod_dirs:
                directory = tempfile.mkdtemp(prefix="envgym-fake-volume-")
                os.chown(directory, uid or 0, gid or 0)
                os.chmod(directory, mode)
                self._pod_dirs[key] = directory
            return self._pod_dirs[key]

    def _write_secret(self, namespace: str, source: Doc, directory: str, fs_group: int | None) -> None:
        secret = self.get("secrets", namespace, source["secretName"])
        if secret is None:
            raise docker.errors.DockerException(f'secret "{source["secretName"]}" not found')
        mode = source.get("defaultMode", 0o644) | (0o440 if fs_group is not None else 0)
        for key, value in secret.get("data", {}).items():
            path = os.path.join(directory, key)
            with open(path, "wb") as fh:
                fh.write(base64.b64decode(value))
            os.chown(path, 0, fs_group or 0)
            os.chmod(path, mode)

    def _run_container(self, namespace: str, pod: Doc, c: Doc) -> Any:
        spec = pod["spec"]
        if len(spec["containers"]) != 1:
            raise docker.errors.DockerException("the fake kubelet runs exactly one container per pod")
        pod_sc, sc = spec.get("securityContext", {}), c.get("securityContext", {})
        uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
        gid = sc.get("runAsGroup", pod_sc.get("runAsGroup", uid))
        fs_group = pod_sc.get("fsGroup", gid)
        env = {}
        for var in c.get("env", []):
            if "value" not in var:
                raise docker.errors.DockerException(f"env {var['name']}: the fake supports plain values only")
            env[var["name"]] = var["value"]
        binds, tmpfs = self._mounts(namespace, pod, c, uid, fs_group)
        limits = c.get("resources", {}).get("limits", {})
        memory = int(_quantity(limits["memory"])) if "memory" in limits else None
        caps = sc.get("capabilities", {})
        self._ensure_network()
        is_init = c is not spec["containers"][0]
        return self.docker_client.containers.run(
            c["image"],
            entrypoint=c.get("command"),
            command=c.get("args"),
            environment=env,
            working_dir=c.get("workingDir"),
            user=f"{uid}:{gid}" if uid is not None else None,
            group_add=[str(fs_group)] if fs_group is not None else None,
            read_only=bool(sc.get("readOnlyRootFilesystem")),
            cap_drop=caps.get("drop"),
            cap_add=caps.get("add"),
            security_opt=["no-new-privileges"] if sc.get("allowPrivilegeEscalation") is False else None,
            mem_limit=memory,
            memswap_limit=memory,
            nano_cpus=int(_quantity(limits["cpu"]) * 1e9) if "cpu" in limits else None,
            volumes=binds,
            tmpfs=tmpfs,
            network=NETWORK,
            labels={
                **pod["metadata"].get("labels", {}),
                FAKE_LABEL: f"{namespace}/{pod['metadata']['name']}",
            },
            name=self._container_name(namespace, pod["metadata"]["name"])
            + (f"-{c['name']}" if is_init else ""),
            detach=True,
        )

    def _ensure_network(self) -> None:
        if not self.docker_client.networks.list(names=[NETWORK]):
            with contextlib.suppress(docker.errors.APIError):
                self.docker_client.networks.create(
                    NETWORK, driver="bridge", internal=True, labels={FAKE_LABEL: "network"}
                )

    def _remove_container(self, namespace: str, name: str) -> None:
        """Remove the pod's containers (init ones too) and the host directories of its volumes."""
        # Sparse, as in shutdown(): a full list inspects each container and one removed meanwhile raises NotFound.
        for container in self.docker_client.containers.list(
            all=True, sparse=True, filters={"label": f"{FAKE_LABEL}={namespace}/{name}"}
        ):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        with self.changed:
            keys = [k for k in self._pod_dirs if k[0] == namespace and k[1].startswith(f"{name}/")]
            dirs = [self._pod_dirs.pop(k) for k in keys]
        for directory in dirs:
            shutil.rmtree(directory, ignore_errors=True)

    def logs(self, namespace: str, name: str) -> bytes | None:
        try:
            return bytes(self.docker_client.containers.get(self._container_name(namespace, name)).logs())
        except docker.errors.NotFound:
            return None

    def shutdown(self) -> None:
        """Delete every object (and so every container) and the network."""
        with self.changed:
            keys = list(self.objects)
        for key in keys:
            self.delete(*key)
        # Sparse: a full list inspects each container, and one removed meanwhile would raise NotFound.
        for leftover in self.docker_client.containers.list(
            all=True, sparse=True, filters={"label": FAKE_LABEL}
        ):
            with contextlib.suppress(docker.errors.NotFound):
                leftover.remove(force=True)
        for network in self.docker_client.networks.list(names=[NETWORK]):
            with contextlib.suppress(docker.errors.APIError):
                network.remove()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster: FakeCluster

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read the cluster state, not an access log."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        match = _PATH.match(split.path)
        if match is None:
            return self._send(404, _status(404, "NotFound", f"the fake API serves no {split.path}"))
        namespace, resource, name, sub = match.groups()
        cluster = self.cluster
        if method == "POST" and name is None:
            refused = cluster.admit(resource, namespace)
            if refused is not None:
                return self._send(*refused)
            return self._send(*cluster.create(resource, namespace, body or {}))
        if method == "GET" and name is None and query.get("watch") in ("true", "1"):
            since = query.get("resourceVersion")
            return self._stream(
                cluster.watch(
                    resource,
                    namespace,
                    query.get("labelSelector"),
                    query.get("fieldSelector"),
                    int(since) if since else None,
                    float(query.get("timeoutSeconds", 30)),
                )
            )
        if method == "GET" and name is None:
            return self._send(
                200,
                cluster.list_objects(
                    resource, namespace, query.get("labelSelector"), query.get("fieldSelector")
                ),
            )
        if method == "GET" and sub == "log":
            logs = cluster.logs(namespace, name)
            if logs is None:
                return self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
            return self._send_raw(200, logs, "text/plain")
        if method == "GET":
            obj = cluster.get(resource, namespace, name)
        elif method == "DELETE":
            obj = cluster.delete(resource, namespace, name)
        else:
            return self._send(405, _status(405, "MethodNotAllowed", f"{method} {split.path}"))
        if obj is None:
            return self._send(404, _status(404, "NotFound", f'{resource} "{name}" not found'))
        return self._send(200, obj)

    def _send(self, code: int, obj: Doc, headers: dict[str, str] | None = None) -> None:
        self._send_raw(code, json.dumps(obj).encode(), "application/json", headers)

    def _send_raw(
        self, code: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: Any) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped watching


class FakeApiServer:
    """The fake on 127.0.0.1:<free port>; `url` goes into a kubernetes client Configuration as `host`."""

    def __init__(self, docker_client: docker.DockerClient) -> None:
        self.cluster = FakeCluster(docker_client)
        handler = type("Handler", (_Handler,), {"cluster": self.cluster})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.cluster.shutdown()
