"""checkov (a static analyser of Kubernetes manifests, from PyPI) passes on every rendered overlay.

Each check that still fails is skipped by id for the overlays where it fails, with the reason next to it here and
in docs/kubernetes.md; any other failure, or any of these on another overlay, fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from envgym.deploy import K8S_DIR, dump, overlay_names, render, resolve_overlay

pytestmark = pytest.mark.slow

CHECKOV_VENV = Path(os.environ.get("ENVGYM_CHECKOV_VENV", Path.home() / ".cache" / "envgym" / "checkov"))
"""checkov pins dependency versions (boto3 among them) that conflict with envgym's, so it gets a venv of its own:
`scripts/install.sh --dev` makes it."""

_TAGS = "Images are referenced by release tag; pin digests (`kustomize edit set image NAME@sha256:...`) in the overlay that deploys a build"
_LIVENESS = "Sandbox pods run to completion (restartPolicy Never, activeDeadlineSeconds); a liveness kill would only end a busy sandbox mid-episode"
_PULL = "dev and agent-sandbox run images side-loaded into kind/minikube nodes, which Always would try to pull; prod uses Always"
SKIPS: dict[str, dict[str, str]] = {
    "dev": {"CKV_K8S_43": _TAGS, "CKV_K8S_8": _LIVENESS, "CKV_K8S_15": _PULL},
    "agent-sandbox": {"CKV_K8S_43": _TAGS, "CKV_K8S_8": _LIVENESS, "CKV_K8S_15": _PULL},
    "prod": {"CKV_K8S_43": _TAGS, "CKV_K8S_8": _LIVENESS},
}


def _checkov() -> Path:
    binary = CHECKOV_VENV / "bin" / "checkov"
    if not binary.is_file():
        pytest.fail(
            f"checkov is not installed at {binary}; run scripts/install.sh --dev (or set ENVGYM_CHECKOV_VENV)"
        )
    return binary


def test_every_overlay_has_a_skip_list() -> None:
    assert set(SKIPS) == set(overlay_names())


@pytest.mark.parametrize("overlay", overlay_names())
def test_checkov_finds_no_failed_check_beyond_the_documented_skips(overlay: str, tmp_path: Path) -> None:
    manifest = tmp_path / f"{overlay}.yaml"
    manifest.write_text(dump(render(resolve_overlay(overlay))))
    skips = SKIPS[overlay]
    proc = subprocess.run(
        [
            str(_checkov()),
            "--file",
            str(manifest),
            "--framework",
            "kubernetes",
            "--skip-check",
            ",".join(sorted(skips)),
            "--compact",
            "--quiet",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    report = json.loads(proc.stdout)
    failed = [
        f"{f['check_id']} {f['check_name']}: {f['resource']}" for f in report["results"]["failed_checks"]
    ]
    assert failed == [], "\n".join(failed)
    assert report["summary"]["passed"] > 200, report["summary"]  # it really checked the manifests
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_docs_list_every_skipped_check_with_its_reason() -> None:
    docs = (K8S_DIR.parent / "docs" / "kubernetes.md").read_text()
    for skips in SKIPS.values():
        for check, reason in skips.items():
            assert check in docs and reason in docs, check
