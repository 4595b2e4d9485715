"""Rendering the shipped kustomize overlays offline, with `kubectl kustomize` or the built-in renderer."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Literal

import yaml

from envgym.deploy.kustomize import Doc, RenderError, render_builtin

Engine = Literal["auto", "kubectl", "python"]

_MIN_KUSTOMIZE_MAJOR = 5


def shipped_k8s_dir() -> Path:
    """The manifests: `envgym/k8s/` in an installed wheel (setup.py copies them there), `k8s/` in a checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "k8s", package.parent / "k8s"):
        if (candidate / "overlays").is_dir():
            return candidate
    return package.parent / "k8s"


K8S_DIR = shipped_k8s_dir()


def overlay_names(k8s_dir: Path = K8S_DIR) -> list[str]:
    """The overlays shipped under `k8s_dir/overlays`, sorted."""
    overlays = k8s_dir / "overlays"
    return sorted(p.name for p in overlays.iterdir() if (p / "kustomization.yaml").is_file())


def resolve_overlay(name_or_path: str, k8s_dir: Path = K8S_DIR) -> Path:
    """An overlay name (`dev`) or a path to any kustomization directory."""
    candidate = Path(name_or_path)
    if (candidate / "kustomization.yaml").is_file():
        return candidate
    named = k8s_dir / "overlays" / name_or_path
    if (named / "kustomization.yaml").is_file():
        return named
    known = ", ".join(overlay_names(k8s_dir)) if (k8s_dir / "overlays").is_dir() else "none found"
    raise RenderError(
        f"overlay {name_or_path!r}: no kustomization.yaml there or in {k8s_dir}/overlays "
        f"(known overlays: {known})"
    )


def render(directory: Path, engine: Engine = "auto") -> list[Doc]:
    """Render a kustomization directory to its documents, in kustomize's output order.

    `auto` uses `kubectl kustomize` when kubectl embeds kustomize v5 or newer, else the built-in renderer
    (kubectl <= 1.23, e.g. Debian's 1.20, embeds kustomize v2, which lacks `labels` and targeted `patches`).
    """
    if engine == "kubectl" or (engine == "auto" and kubectl_kustomize_major() >= _MIN_KUSTOMIZE_MAJOR):
        return render_with_kubectl(directory)
    return render_builtin(directory)


def kubectl_kustomize_major() -> int:
    """The major version of the kustomize inside kubectl on PATH; 0 when absent or too old to report it."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return 0
    proc = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True, check=False)
    found = re.search(r"Kustomize Version: v(\d+)", proc.stdout)
    return int(found.group(1)) if found else 0


def render_with_kubectl(directory: Path) -> list[Doc]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise RenderError(
            "engine kubectl: `kubectl` is not on PATH (install kubernetes-client or use --engine python)"
        )
    proc = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RenderError(f"kubectl kustomize {directory} failed: {proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def dump(docs: list[Doc]) -> str:
    """Multi-document YAML, keys sorted like kubectl's output."""
    return yaml.safe_dump_all(docs, sort_keys=True, default_flow_style=False)
