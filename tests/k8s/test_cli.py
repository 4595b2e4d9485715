"""`envgym k8s`: render offline; status and reap through a kubeconfig that points at the fake API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envgym.cli import main
from envgym.deploy import render, resolve_overlay
from envgym.sandbox.kubernetes import KubernetesBackend
from envgym.sandbox.spec import SandboxSpec

from .conftest import NAMESPACE


def _run(argv: list[str]) -> int:
    return main(["k8s", *argv])


@pytest.mark.parametrize("engine", ["python", "auto"])
def test_render_prints_the_overlay_as_yaml(engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["render", "prod", "--engine", engine]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs == render(resolve_overlay("prod"), "python")


def test_render_names_the_known_overlays_when_given_an_unknown_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _run(["render", "staging"]) == 2
    err = capsys.readouterr().err
    assert "staging" in err and "dev" in err and "prod" in err


def test_render_writes_a_file(tmp_path: Path) -> None:
    out = tmp_path / "dev.yaml"
    assert _run(["render", "dev", "--engine", "python", "-o", str(out)]) == 0
    kinds = {d["kind"] for d in yaml.safe_load_all(out.read_text())}
    assert {"Namespace", "PodTemplate", "NetworkPolicy", "Deployment", "Job"} <= kinds


@pytest.mark.docker
def test_status_and_reap_use_the_kubeconfig_context(
    backend: KubernetesBackend, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = backend.create(SandboxSpec(ttl_s=300), run_id="run-cli")
    common = ["--kubeconfig", str(kubeconfig), "-n", NAMESPACE, "--json"]
    assert _run(["status", *common]) == 0
    pods = json.loads(capsys.readouterr().out)["pods"]
    assert [(p["sandbox_id"], p["run_id"], p["phase"], p["ready"]) for p in pods] == [
        (box.id, "run-cli", "Running", True)
    ]
    assert _run(["reap", *common, "--run-id", "run-cli"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == [box.id]
    assert backend.list_sandboxes() == []
