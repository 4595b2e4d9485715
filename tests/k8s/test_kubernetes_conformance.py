"""The shared sandbox conformance suite on the Kubernetes backend, against the fake API server.

The fake (tests/k8s/fake_apiserver.py) is not a cluster: it serves the real REST API to the real
`kubernetes` client and runs every pod as a real Docker container of the sandbox image.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from envgym.sandbox.kubernetes import KubernetesBackend
from tests.sandbox.conformance import SandboxConformance

from .conftest import NAMESPACE, write_kubeconfig
from .fake_apiserver import FakeApiServer

pytestmark = pytest.mark.docker


class TestKubernetesConformance(SandboxConformance):
    @pytest.fixture(scope="class")
    def backend_name(self) -> str:
        return "kubernetes"

    @pytest.fixture(scope="class", autouse=True)
    def kube_environment(
        self, fake_api: FakeApiServer, api_client: k8s.ApiClient, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[None]:
        """Point the default kube context at the fake, so `get_backend("kubernetes")` in the suite's
        child process (the abandoned-client test) reaches it through normal kubeconfig loading."""
        path = write_kubeconfig(tmp_path_factory.mktemp("kube") / "config", fake_api.url)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KUBECONFIG", str(path))
            mp.setenv("ENVGYM_K8S_NAMESPACE", NAMESPACE)
            yield

    @pytest.fixture(scope="class")
    def backend(self, backend_name: str, api_client: k8s.ApiClient) -> KubernetesBackend:
        return KubernetesBackend(namespace=NAMESPACE, api_client=api_client)
