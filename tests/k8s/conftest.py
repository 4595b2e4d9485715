"""Fixtures: the fake Kubernetes API (tests/k8s/fake_apiserver.py, not a cluster) with Docker-backed pods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from kubernetes import client as k8s

from envgym.deploy import render, resolve_overlay
from envgym.sandbox.kubernetes import KubernetesBackend
from envgym.sandbox.spec import DEFAULT_IMAGE

from .fake_apiserver import FakeApiServer

NAMESPACE = "envgym-dev"


def _docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        client.images.get(DEFAULT_IMAGE)
    except Exception as exc:
        pytest.skip(
            f"needs a running Docker engine and the {DEFAULT_IMAGE} image (envgym sandbox build-image): {exc}"
        )
    return client


def write_kubeconfig(path: Path, server_url: str) -> Path:
    """A kubeconfig whose current context is the fake, for clients that load config the normal way."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server_url}'}}}}]\n"
        "users: [{name: fake, user: {token: unused}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
    )
    return path


@pytest.fixture(scope="session")
def fake_api() -> Iterator[FakeApiServer]:
    with FakeApiServer(_docker_client()) as server:
        yield server


@pytest.fixture(scope="session")
def api_client(fake_api: FakeApiServer) -> k8s.ApiClient:
    """The real kubernetes client, configured for the fake, with the dev overlay's PodTemplate loaded."""
    api = k8s.ApiClient(k8s.Configuration(host=fake_api.url))
    template = next(d for d in render(resolve_overlay("dev")) if d["kind"] == "PodTemplate")
    # The dev overlay names the registry image envgym-sandbox:dev; the fake's node has the local build.
    spec = template["template"]["spec"]
    for container in spec["initContainers"] + spec["containers"]:
        container["image"] = DEFAULT_IMAGE
    body = k8s.V1PodTemplate.from_dict(template)
    assert body is not None
    k8s.CoreV1Api(api).create_namespaced_pod_template(NAMESPACE, body)
    return api


@pytest.fixture()
def backend(api_client: k8s.ApiClient) -> Iterator[KubernetesBackend]:
    backend = KubernetesBackend(namespace=NAMESPACE, api_client=api_client, max_starting=2)
    yield backend
    backend.reap(older_than_s=0)


@pytest.fixture()
def kubeconfig(fake_api: FakeApiServer, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", fake_api.url)
