"""A stateful fake of the Kubernetes API for tests: it is NOT a cluster and must never be presented as one.

It speaks the real REST API over HTTP (the subset envgym's backend and CLI use: pods with label/field
selectors, watch and logs; configmaps; podtemplates; ownerReference garbage collection) so the real
`kubernetes` client talks to it unchanged. Its "kubelet" runs each pod as a real Docker container from the
pod spec (image, command/args, env, user, read-only root, dropped capabilities, no-new-privileges, cpu and
memory limits, emptyDir volumes as size-limited tmpfs), probes readiness over HTTP, enforces
activeDeadlineSeconds and reports container exits as pod phases. All pods share one `internal` Docker
network, which stands in for the deny-all-egress NetworkPolicy (NetworkPolicy objects themselves are not
interpreted). Not implemented: scheduling, quotas, admission, RBAC, Pod Security, ephemeral-storage.
"""

from __future__ import annotations

import contextlib
import json
import re
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
_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|configmaps|podtemplates)(?:/([^/]+))?(?:/(log))?$")
_KINDS = {"pods": "Pod", "configmaps": "ConfigMap", "podtemplates": "PodTemplate"}
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
    _starting: set[str] = field(default_factory=set)

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
        try:
            container = self._run_container(namespace, pod)
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
                code = container.attrs["State"]["ExitCode"]
                self._update_pod(
                    namespace,
                    name,
                    phase="Succeeded" if code == 0 else "Failed",
                    ready=False,
                    reason="Completed" if code == 0 else "Error",
                    message=f"exit code {code}",
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

    def _run_container(self, namespace: str, pod: Doc) -> Any:
        spec = pod["spec"]
        if len(spec["containers"]) != 1 or spec.get("initContainers"):
            raise docker.errors.DockerException("the fake kubelet runs exactly one container per pod")
        c = spec["containers"][0]
        pod_sc, sc = spec.get("securityContext", {}), c.get("securityContext", {})
        uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
        gid = sc.get("runAsGroup", pod_sc.get("runAsGroup", uid))
        fs_group = pod_sc.get("fsGroup", gid)
        env = {}
        for var in c.get("env", []):
            if "value" not in var:
                raise docker.errors.DockerException(f"env {var['name']}: the fake supports plain values only")
            env[var["name"]] = var["value"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        tmpfs = {}
        for mount in c.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "emptyDir" not in volume:
                raise docker.errors.DockerException(
                    f"volume {mount['name']}: the fake supports emptyDir only"
                )
            size = int(_quantity(volume["emptyDir"].get("sizeLimit", "64Mi")))
            tmpfs[mount["mountPath"]] = f"size={size},uid={uid or 0},gid={fs_group or 0},mode=0770"
        limits = c.get("resources", {}).get("limits", {})
        memory = int(_quantity(limits["memory"])) if "memory" in limits else None
        caps = sc.get("capabilities", {})
        self._ensure_network()
        return self.docker_client.containers.run(
            c["image"],
            entrypoint=c.get("command"),
            command=c.get("args"),
            environment=env,
            working_dir=c.get("workingDir"),
            user=f"{uid}:{gid}" if uid is not None else None,
            read_only=bool(sc.get("readOnlyRootFilesystem")),
            cap_drop=caps.get("drop"),
            cap_add=caps.get("add"),
            security_opt=["no-new-privileges"] if sc.get("allowPrivilegeEscalation") is False else None,
            mem_limit=memory,
            memswap_limit=memory,
            nano_cpus=int(_quantity(limits["cpu"]) * 1e9) if "cpu" in limits else None,
            tmpfs=tmpfs,
            network=NETWORK,
            labels={
                **pod["metadata"].get("labels", {}),
                FAKE_LABEL: f"{namespace}/{pod['metadata']['name']}",
            },
            name=self._container_name(namespace, pod["metadata"]["name"]),
            detach=True,
        )

    def _ensure_network(self) -> None:
        if not self.docker_client.networks.list(names=[NETWORK]):
            with contextlib.suppress(docker.errors.APIError):
                self.docker_client.networks.create(
                    NETWORK, driver="bridge", internal=True, labels={FAKE_LABEL: "network"}
                )

    def _remove_container(self, namespace: str, name: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self.docker_client.containers.get(self._container_name(namespace, name)).remove(force=True)

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
        for leftover in self.docker_client.containers.list(all=True, sparse=True, filters={"label": FAKE_LABEL}):
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

    def _send(self, code: int, obj: Doc) -> None:
        self._send_raw(code, json.dumps(obj).encode(), "application/json")

    def _send_raw(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
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
