"""The built-in kustomize renderer: only the subset the shipped overlays use, so it works with no kubectl.

It implements resources, namespace, labels without selectors, images, JSON 6902 patches by kind/name and image
field specs for custom kinds, and rejects any other kustomization field by name, so it can never silently render
something different. tests/k8s checks that it and `kubectl kustomize` produce the same documents for every
shipped overlay.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Doc = dict[str, Any]

_SUPPORTED_FIELDS = {
    "apiVersion",
    "kind",
    "namespace",
    "labels",
    "resources",
    "images",
    "patches",
    "configurations",
}
# Kinds that kustomize's images transformer knows without configuration; it rewrites their containers.
_WORKLOAD_KINDS = {
    "Pod",
    "PodTemplate",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "ReplicationController",
}
_CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "StorageClass",
    "PersistentVolume",
    "PriorityClass",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}
# kustomize's legacy output order (api/resid/gvk.go): these kinds first, in this order, then the rest.
_ORDER_FIRST = [
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
]
_ORDER_LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]


class RenderError(Exception):
    """A kustomization could not be rendered; the message names the file and field."""


def render_builtin(directory: Path) -> list[Doc]:
    """Render a kustomization directory with the built-in subset, in kustomize's output order."""
    docs = _build(directory.resolve())
    return sorted(docs, key=_order_key)


@dataclass
class _ImageFieldSpec:
    kind: str
    path: list[str] = field(default_factory=list)


def _load_kustomization(directory: Path) -> Doc:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise RenderError(f"{directory}: no kustomization.yaml")
    data = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(data) - _SUPPORTED_FIELDS)
    if unknown:
        raise RenderError(
            f"{path}: field(s) {unknown} are not supported by the built-in renderer "
            f"(supported: {sorted(_SUPPORTED_FIELDS)}); use --engine kubectl"
        )
    return data


def _build(directory: Path) -> list[Doc]:
    kust = _load_kustomization(directory)
    where = directory / "kustomization.yaml"
    docs: list[Doc] = []
    for entry in kust.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            docs.extend(_build(target))
        elif target.is_file():
            docs.extend(copy.deepcopy(d) for d in yaml.safe_load_all(target.read_text()) if d)
        else:
            raise RenderError(f"{where}: resources entry {entry!r} is neither a file nor a directory")
    if "namespace" in kust:
        for doc in docs:
            _set_namespace(doc, kust["namespace"])
    for patch in kust.get("patches", []):
        _apply_patch(docs, patch, where)
    for labels in kust.get("labels", []):
        if labels.get("includeSelectors") or labels.get("includeTemplates"):
            raise RenderError(f"{where}: labels with includeSelectors/includeTemplates are not supported")
        for doc in docs:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(labels.get("pairs", {}))
    specs = [_ImageFieldSpec(kind=k) for k in sorted(_WORKLOAD_KINDS)]
    for config in kust.get("configurations", []):
        specs.extend(_load_image_field_specs(directory / config))
    for image in kust.get("images", []):
        for doc in docs:
            _set_images(doc, image, specs)
    return docs


def _set_namespace(doc: Doc, namespace: str) -> None:
    kind = doc.get("kind")
    meta = doc.setdefault("metadata", {})
    if kind == "Namespace":
        meta["name"] = namespace
        return
    old = meta.get("namespace")
    if kind not in _CLUSTER_SCOPED:
        meta["namespace"] = namespace
    if kind in ("RoleBinding", "ClusterRoleBinding"):
        for subject in doc.get("subjects", []):
            if subject.get("kind") == "ServiceAccount" and subject.get("namespace") in (None, old):
                subject["namespace"] = namespace


def _apply_patch(docs: list[Doc], patch: Doc, where: Path) -> None:
    target = patch.get("target", {})
    if set(target) - {"kind", "name"} or "patch" not in patch or set(patch) - {"target", "patch"}:
        raise RenderError(
            f"{where}: patches entries must be an inline JSON 6902 `patch` with a "
            f"`target` of kind and name; got {sorted(patch)} / target {sorted(target)}"
        )
    matched = [
        d
        for d in docs
        if d.get("kind") == target.get("kind", d.get("kind"))
        and d.get("metadata", {}).get("name") == target.get("name", d.get("metadata", {}).get("name"))
    ]
    if not matched:
        raise RenderError(f"{where}: patch target {target} matches no resource")
    ops = yaml.safe_load(patch["patch"])
    if not isinstance(ops, list):
        raise RenderError(f"{where}: patch for {target} must be a JSON 6902 list of operations")
    for doc in matched:
        for op in ops:
            _json6902(doc, op, where)


def _json6902(doc: Doc, op: Doc, where: Path) -> None:
    kind = op.get("op")
    if kind not in ("add", "replace", "remove"):
        raise RenderError(f"{where}: JSON patch op {kind!r} is not supported (add, replace, remove)")
    parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
    parent: Any = doc
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(index, op["value"])
        elif kind == "replace":
            parent[index] = op["value"]
        else:
            del parent[index]
        return
    if kind == "replace" and last not in parent:
        raise RenderError(f"{where}: JSON patch replace {op['path']}: the path does not exist")
    if kind == "remove":
        del parent[last]
    else:
        parent[last] = op["value"]


def _load_image_field_specs(path: Path) -> list[_ImageFieldSpec]:
    config = yaml.safe_load(path.read_text()) or {}
    if set(config) - {"images"}:
        raise RenderError(f"{path}: only `images` field specs are supported, got {sorted(config)}")
    return [_ImageFieldSpec(kind=s["kind"], path=s["path"].split("/")) for s in config.get("images", [])]


def _set_images(doc: Doc, image: Doc, specs: list[_ImageFieldSpec]) -> None:
    for spec in specs:
        if doc.get("kind") != spec.kind:
            continue
        containers = _walk_path(doc, spec.path[:-1]) if spec.path else _all_containers(doc)
        for container in containers:
            if isinstance(container, dict) and "image" in container:
                container["image"] = _rewrite_image(container["image"], image)


def _walk_path(node: Any, path: list[str]) -> Iterator[Any]:
    if not path:
        yield from (node if isinstance(node, list) else [node])
        return
    if isinstance(node, list):
        for item in node:
            yield from _walk_path(item, path)
    elif isinstance(node, dict) and path[0] in node:
        yield from _walk_path(node[path[0]], path[1:])


def _all_containers(node: Any) -> Iterator[Doc]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from _all_containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _all_containers(item)


def _rewrite_image(ref: str, image: Doc) -> str:
    name, tag, digest = ref, "", ""
    if "@" in name:
        name, digest = name.split("@", 1)
    slash = name.rfind("/")
    if ":" in name[slash + 1 :]:
        name, tag = name.rsplit(":", 1)
    if name != image["name"]:
        return ref
    name = image.get("newName", name)
    if "digest" in image:
        return f"{name}@{image['digest']}"
    tag = str(image.get("newTag", tag))
    if digest and "newTag" not in image:
        return f"{name}@{digest}"
    return f"{name}:{tag}" if tag else name


def _order_key(doc: Doc) -> tuple[int, str, str, str]:
    kind = doc.get("kind", "")
    if kind in _ORDER_FIRST:
        rank = _ORDER_FIRST.index(kind) - len(_ORDER_FIRST)
    elif kind in _ORDER_LAST:
        rank = _ORDER_LAST.index(kind) + 1
    else:
        rank = 0
    api_version = doc.get("apiVersion", "")
    group, _, version = api_version.rpartition("/")
    gvk = f"{group or '~G'}_{version or '~V'}_{kind or '~K'}"
    meta = doc.get("metadata", {})
    return rank, gvk, meta.get("namespace", ""), meta.get("name", "")
