"""Deploying envgym on Kubernetes: the shipped manifests (k8s/, inside the wheel too) and their renderer."""

from envgym.deploy.kustomize import Doc, RenderError, render_builtin
from envgym.deploy.render import (
    K8S_DIR,
    Engine,
    dump,
    kubectl_kustomize_major,
    overlay_names,
    render,
    render_with_kubectl,
    resolve_overlay,
)

__all__ = [
    "K8S_DIR",
    "Doc",
    "Engine",
    "RenderError",
    "dump",
    "kubectl_kustomize_major",
    "overlay_names",
    "render",
    "render_builtin",
    "render_with_kubectl",
    "resolve_overlay",
]
