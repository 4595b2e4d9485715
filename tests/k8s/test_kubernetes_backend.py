"""The Kubernetes backend against the fake API server: real client, real HTTP, real Docker-run pods."""

from __future__ import annotations

import base64
import contextlib
import copy
import threading
import time
from typing import Any

import docker
import httpx
import pytest
from kubernetes import client as k8s

from envgym.sandbox.base import LABEL_MANAGED_BY, LABEL_RUN_ID, LABEL_SANDBOX_ID
from envgym.sandbox.errors import (
    InvalidRequestError,
    SandboxClosedError,
    SandboxOutOfMemoryError,
    SandboxUnavailableError,
)
from envgym.sandbox.kubernetes import KubernetesBackend
from envgym.sandbox.spec import SandboxSpec

from .conftest import NAMESPACE
from .fake_apiserver import FAKE_LABEL, FakeApiServer

pytestmark = pytest.mark.docker


def _pod(api_client: k8s.ApiClient, name: str) -> dict[str, Any]:
    return api_client.sanitize_for_serialization(
        k8s.CoreV1Api(api_client).read_namespaced_pod(name, NAMESPACE)
    )


def _containers() -> list[Any]:
    client = docker.from_env()
    found = []
    for sparse in client.containers.list(all=True, sparse=True, filters={"label": FAKE_LABEL}):
        with contextlib.suppress(docker.errors.NotFound):
            found.append(client.containers.get(sparse.id))
    return found


def test_pod_comes_from_the_template_with_labels_owner_deadline_and_spec_limits(
    backend: KubernetesBackend, api_client: k8s.ApiClient
) -> None:
    spec = SandboxSpec(cpu=0.5, memory_mb=192, disk_mb=64, ttl_s=300, labels={"task": "t1"})
    with backend.create(spec, run_id="run-a") as box:
        pod = _pod(api_client, f"envgym-sbx-{box.id}")
        labels = pod["metadata"]["labels"]
        assert labels[LABEL_MANAGED_BY] == "envgym" and labels[LABEL_RUN_ID] == "run-a"
        assert labels[LABEL_SANDBOX_ID] == box.id and labels["task"] == "t1"
        assert labels["envgym.io/role"] == "sandbox"  # from the PodTemplate, so the NetworkPolicy selects it
        owner = api_client.sanitize_for_serialization(
            k8s.CoreV1Api(api_client).read_namespaced_config_map("envgym-run-run-a", NAMESPACE)
        )
        assert pod["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
        spec_ = pod["spec"]
        assert spec_["activeDeadlineSeconds"] == 330 and spec_["restartPolicy"] == "Never"
        container = spec_["containers"][0]
        assert container["resources"]["limits"] == {
            "cpu": "500m",
            "memory": "192Mi",
            "ephemeral-storage": "128Mi",
        }
        assert (
            container["resources"]["requests"]["memory"] == "192Mi"
        )  # the template's 256Mi, capped at the limit
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        sizes = {v["name"]: v["emptyDir"]["sizeLimit"] for v in spec_["volumes"] if "emptyDir" in v}
        assert sizes == {"workspace": "64Mi", "tmp": "64Mi", "envgym-token": "1Mi"}
        assert box.exec("id -u").stdout.strip() == "10001"
        assert box.exec("touch /etc/x").exit_code != 0  # read-only root, as the template says


def test_commands_files_and_timeouts_run_inside_the_pod(backend: KubernetesBackend) -> None:
    with backend.create(SandboxSpec(ttl_s=300)) as box:
        box.write_file("data/in.txt", b"x" * 100_000)
        result = box.exec("wc -c < data/in.txt && cat /proc/1/cmdline | tr '\\0' ' '")
        assert result.stdout.split()[0] == "100000"
        assert "envgym/sandbox/launch.py" in result.stdout  # the fast launcher, as in the docker backend
        started = time.monotonic()
        slow = box.exec("sleep 30", timeout=1)
        assert slow.timed_out and time.monotonic() - started < 10


def test_close_deletes_the_pod_and_its_container(
    backend: KubernetesBackend, api_client: k8s.ApiClient
) -> None:
    box = backend.create(SandboxSpec(ttl_s=300))
    name = f"envgym-sbx-{box.id}"
    box.close()
    box.close()
    with pytest.raises(SandboxClosedError):
        box.exec("true")
    assert name not in {p.name for p in backend.list_sandboxes()}
    assert not [c for c in _containers() if c.labels.get(LABEL_SANDBOX_ID) == box.id]


def test_ending_a_run_garbage_collects_its_pods_through_owner_references(backend: KubernetesBackend) -> None:
    boxes = [backend.create(SandboxSpec(ttl_s=300), run_id="run-gc") for _ in range(2)]
    other = backend.create(SandboxSpec(ttl_s=300), run_id="run-keep")
    backend.end_run("run-gc")
    left = {p.sandbox_id for p in backend.list_sandboxes()}
    assert not left & {b.id for b in boxes}
    assert other.id in left
    assert other.exec("echo alive").stdout == "alive\n"
    other.close()


def test_reap_removes_pods_whose_server_exited_at_ttl_and_pods_older_than_a_bound(
    backend: KubernetesBackend,
) -> None:
    expiring = backend.create(SandboxSpec(ttl_s=2, idle_s=None))
    keeper = backend.create(SandboxSpec(ttl_s=300))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        phases = {p.sandbox_id: p.phase for p in backend.list_sandboxes()}
        if phases.get(expiring.id) == "Succeeded":
            break
        time.sleep(0.3)
    assert backend.reap(orphans=False) == [expiring.id]
    assert backend.reap(orphans=False, older_than_s=0) == [keeper.id]
    assert backend.list_sandboxes() == []
    assert not _containers()


def test_starting_pods_are_bounded_and_env_servers_serve_rollouts(
    api_client: k8s.ApiClient, fake_api: FakeApiServer
) -> None:
    backend = KubernetesBackend(namespace=NAMESPACE, api_client=api_client, max_starting=2)
    fake_api.cluster.max_starting_seen = 0
    servers = backend.place_env_servers("CartPole-v1", 4, SandboxSpec(ttl_s=300))
    try:
        assert len(servers) == 4 and len({s.url for s in servers}) == 4
        assert 1 <= fake_api.cluster.max_starting_seen <= 2
        headers = {"Authorization": f"Bearer {servers[0].token}"}
        with httpx.Client(base_url=servers[0].url, headers=headers, timeout=30) as http:
            session = http.post("/v1/env/sessions", json={}).json()
            assert session["env_id"] == "CartPole-v1"
            sid = session["session_id"]
            http.post(f"/v1/env/sessions/{sid}/reset", json={"seed": 3}).raise_for_status()
            step = http.post(f"/v1/env/sessions/{sid}/step", json={"action": 1}).json()
            assert step["reward"] == 1.0
            assert httpx.post(f"{servers[1].url}/v1/env/sessions", json={}, timeout=5).status_code == 401
    finally:
        for server in servers:
            server.sandbox.close()


def test_a_network_allow_list_is_refused_before_any_pod_is_created(backend: KubernetesBackend) -> None:
    with pytest.raises(InvalidRequestError, match="network"):
        backend.create(SandboxSpec(network=["pypi.org"]))
    assert backend.list_sandboxes() == []


def test_the_token_is_a_secret_file_that_code_in_the_pod_cannot_read_back(
    backend: KubernetesBackend, api_client: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(api_client)
    with backend.create(SandboxSpec(ttl_s=300)) as box:
        pod = _pod(api_client, f"envgym-sbx-{box.id}")
        containers = pod["spec"]["initContainers"] + pod["spec"]["containers"]
        assert not [e for c in containers for e in c.get("env", []) if "TOKEN" in e["name"]]
        secret_volume = next(v for v in pod["spec"]["volumes"] if "secret" in v)["secret"]
        assert secret_volume["defaultMode"] == 0o400
        secret = core.read_namespaced_secret(secret_volume["secretName"], NAMESPACE)
        token = base64.b64decode(secret.data["token"]).decode()
        assert secret.metadata.owner_references[0].kind == "ConfigMap"  # garbage-collected with the run
        found = box.exec(
            f"grep -rl -- '{token}' /proc/[0-9]*/environ /run /var/run /workspace /tmp 2>/dev/null; "
            "ls -A /run/envgym; ls /var/run/secrets 2>&1"
        )
        assert token not in found.stdout
        assert "environ" not in found.stdout and "No such file" in found.stdout
    with pytest.raises(k8s.ApiException) as gone:
        core.read_namespaced_secret(secret_volume["secretName"], NAMESPACE)
    assert gone.value.status == 404  # closing the sandbox deletes its Secret


def test_a_pod_whose_image_cannot_be_pulled_fails_fast_with_the_reason_and_frees_its_slot(
    api_client: k8s.ApiClient,
) -> None:
    backend = KubernetesBackend(namespace=NAMESPACE, api_client=api_client, max_starting=1)
    started = time.monotonic()
    with pytest.raises(SandboxUnavailableError, match=r"ErrImagePull.*envgym-sandbox:no-such-tag"):
        backend.create(SandboxSpec(image="envgym-sandbox:no-such-tag", ttl_s=300))
    assert time.monotonic() - started < 15  # not the 180 s ready timeout
    assert backend.list_sandboxes() == []
    with backend.create(SandboxSpec(ttl_s=300)) as box:  # the one start slot is free again
        assert box.exec("echo up").stdout == "up\n"


def test_an_unschedulable_pod_fails_fast_with_the_schedulers_message(api_client: k8s.ApiClient) -> None:
    template = copy.deepcopy(KubernetesBackend(namespace=NAMESPACE, api_client=api_client).template())
    template["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4096"
    backend = KubernetesBackend(namespace=NAMESPACE, api_client=api_client, template=template)
    started = time.monotonic()
    with pytest.raises(
        SandboxUnavailableError, match=r"Unschedulable: 0/1 nodes are available: 1 Insufficient cpu"
    ):
        backend.create(SandboxSpec(cpu=4096, ttl_s=300))
    assert time.monotonic() - started < 15
    assert backend.list_sandboxes() == []


def test_creates_are_retried_through_429_with_retry_after(
    backend: KubernetesBackend, fake_api: FakeApiServer
) -> None:
    fake_api.cluster.throttled_served = 0
    fake_api.cluster.throttle(2, retry_after_s=1)
    started = time.monotonic()
    with backend.create(SandboxSpec(ttl_s=300)) as box:
        assert box.exec("echo up").stdout == "up\n"
    assert fake_api.cluster.throttled_served == 2
    assert time.monotonic() - started >= 2  # Retry-After was honoured


def test_creates_wait_for_room_in_an_exceeded_quota_up_to_a_bound(
    api_client: k8s.ApiClient, fake_api: FakeApiServer
) -> None:
    backend = KubernetesBackend(namespace=NAMESPACE, api_client=api_client, create_retry_s=30)
    fake_api.cluster.quota[NAMESPACE] = 1
    try:
        first = backend.create(SandboxSpec(ttl_s=300))
        threading.Timer(2, first.close).start()
        with backend.create(SandboxSpec(ttl_s=300)) as second:  # admitted once the first is gone
            assert second.exec("echo up").stdout == "up\n"
            impatient = KubernetesBackend(namespace=NAMESPACE, api_client=api_client, create_retry_s=2)
            started = time.monotonic()
            with pytest.raises(SandboxUnavailableError, match=r"403 after 2s of retries: .*exceeded quota"):
                impatient.create(SandboxSpec(ttl_s=300))
            assert time.monotonic() - started < 10
    finally:
        del fake_api.cluster.quota[NAMESPACE]


def test_a_watch_whose_resource_version_is_gone_lists_again(
    backend: KubernetesBackend, fake_api: FakeApiServer
) -> None:
    fake_api.cluster.expired_watches = 2  # compacted twice in a row between the backend's list and watch
    fake_api.cluster.gone_served = 0
    try:
        with backend.create(SandboxSpec(ttl_s=300)) as box:
            assert box.exec("echo up").stdout == "up\n"
    finally:
        fake_api.cluster.expired_watches = 0
    assert fake_api.cluster.gone_served == 2


def test_a_run_ended_by_another_process_gets_a_new_owner_for_its_next_pod(
    backend: KubernetesBackend, api_client: k8s.ApiClient
) -> None:
    first = backend.create(SandboxSpec(ttl_s=300), run_id="run-ended")
    other_process = KubernetesBackend(namespace=NAMESPACE, api_client=api_client)
    other_process.end_run("run-ended")  # the garbage collector takes the first pod with it
    with backend.create(SandboxSpec(ttl_s=300), run_id="run-ended") as second:
        time.sleep(1)  # the fake's collector acts 0.2 s after a create with a missing owner
        assert second.exec("echo alive").stdout == "alive\n"
        owner = k8s.CoreV1Api(api_client).read_namespaced_config_map("envgym-run-run-ended", NAMESPACE)
        pod = _pod(api_client, f"envgym-sbx-{second.id}")
        assert pod["metadata"]["ownerReferences"][0]["uid"] == owner.metadata.uid
    first.close()
    backend.end_run("run-ended")


def test_a_pod_killed_out_of_memory_surfaces_as_a_typed_error(backend: KubernetesBackend) -> None:
    # The server itself must be the OOM killer's choice: it buffers a body near the memory limit. (Code in the
    # sandbox can no longer volunteer it through /proc/1/oom_score_adj: the server is non-dumpable, issue 41.)
    with (
        backend.create(SandboxSpec(memory_mb=128, ttl_s=300)) as box,
        pytest.raises(SandboxOutOfMemoryError, match="out of memory"),
    ):
        box.write_file("big", b"\0" * (120 << 20))
