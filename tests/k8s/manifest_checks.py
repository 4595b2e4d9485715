"""Offline checks on rendered manifests: schema validation and the security policy every overlay must meet.

Each check returns a list of violations (strings naming the object and field), so tests can show both that
the shipped overlays pass and that a deliberately broken manifest is caught.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
from kubernetes_validate.utils import schema_contents

from envgym.k8s_render import K8S_DIR

KUBERNETES_VERSION = "1.34.0"
"""The Kubernetes version the manifests are validated against (kubernetes-validate ships its schemas)."""

CRD_SCHEMA_DIR = K8S_DIR / "schemas" / "agent-sandbox"
CRD_GROUP = "extensions.agents.x-k8s.io/v1beta1"
SANDBOX_ROLES = {"sandbox", "env-server"}

Doc = dict[str, Any]


def name_of(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def schema_violations(doc: Doc) -> list[str]:
    """Strict schema validation: core kinds with kubernetes-validate, agent-sandbox kinds with our schemas."""
    try:
        if doc["apiVersion"] == CRD_GROUP:
            _crd_validator(doc["kind"]).validate(doc)
        else:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except jsonschema.ValidationError as error:
        path = "/".join(str(p) for p in error.absolute_path)
        return [f"{name_of(doc)}: {path}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [f"{name_of(doc)}: {error.message}"]
    return []


def _crd_validator(kind: str) -> jsonschema.Draft202012Validator:
    path = CRD_SCHEMA_DIR / f"{kind.lower()}-extensions-v1beta1.json"
    schema = json.loads(path.read_text())
    definitions = schema_contents(
        f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict/_definitions.json", KUBERNETES_VERSION
    )
    registry: referencing.Registry = referencing.Registry().with_resources(
        [
            (schema["$id"], referencing.Resource.from_contents(schema)),
            (definitions["$id"], referencing.Resource.from_contents(definitions)),
        ]
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def pod_specs(doc: Doc) -> Iterator[tuple[dict[str, str], Doc]]:
    """(pod labels, pod spec) for every pod an object describes."""
    kind = doc["kind"]
    if kind == "Pod":
        yield doc["metadata"].get("labels", {}), doc["spec"]
    elif kind == "PodTemplate":
        yield doc["template"]["metadata"].get("labels", {}), doc["template"]["spec"]
    elif kind in ("Deployment", "Job", "StatefulSet", "DaemonSet", "ReplicaSet"):
        template = doc["spec"]["template"]
        yield template.get("metadata", {}).get("labels", {}), template["spec"]
    elif kind == "CronJob":
        template = doc["spec"]["jobTemplate"]["spec"]["template"]
        yield template.get("metadata", {}).get("labels", {}), template["spec"]
    elif kind == "SandboxTemplate":
        template = doc["spec"]["podTemplate"]
        yield template.get("metadata", {}).get("labels", {}), template["spec"]


def privilege_violations(doc: Doc) -> list[str]:
    """Pod Security `restricted`, plus a read-only root: nothing privileged anywhere."""
    out: list[str] = []
    where = name_of(doc)
    for _, spec in pod_specs(doc):
        pod_sc = spec.get("securityContext", {})
        for flag in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(flag):
                out.append(f"{where}: {flag} is set")
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                out.append(f"{where}: volume {volume['name']} is a hostPath")
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c.get("securityContext", {})
            cw = f"{where} container {c['name']}"
            if sc.get("privileged"):
                out.append(f"{cw}: privileged")
            if sc.get("allowPrivilegeEscalation") is not False:
                out.append(f"{cw}: allowPrivilegeEscalation must be false")
            if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
                out.append(f"{cw}: runAsNonRoot is not set")
            if 0 in (sc.get("runAsUser"), pod_sc.get("runAsUser")):
                out.append(f"{cw}: runs as uid 0")
            if sc.get("readOnlyRootFilesystem") is not True:
                out.append(f"{cw}: readOnlyRootFilesystem must be true")
            caps = sc.get("capabilities", {})
            if "ALL" not in caps.get("drop", []) or caps.get("add"):
                out.append(f"{cw}: capabilities must drop ALL and add none")
            seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                out.append(f"{cw}: seccompProfile must be RuntimeDefault or Localhost, got {seccomp}")
    return out


def resource_violations(doc: Doc) -> list[str]:
    """Every container has cpu and memory requests and limits."""
    out: list[str] = []
    for _, spec in pod_specs(doc):
        for c in spec.get("initContainers", []) + spec["containers"]:
            resources = c.get("resources", {})
            for section in ("requests", "limits"):
                missing = {"cpu", "memory"} - set(resources.get(section, {}))
                if missing:
                    out.append(f"{name_of(doc)} container {c['name']}: {section} lacks {sorted(missing)}")
    return out


def lifetime_violations(doc: Doc) -> list[str]:
    """Run-to-completion pods have a hard deadline; long-running pods have readiness and liveness probes."""
    out: list[str] = []
    where = name_of(doc)
    if doc["kind"] in ("Pod", "PodTemplate", "SandboxTemplate", "Job"):
        for _, spec in pod_specs(doc):
            if not spec.get("activeDeadlineSeconds"):
                out.append(f"{where}: pod spec has no activeDeadlineSeconds")
            if spec.get("restartPolicy") != "Never":
                out.append(f"{where}: restartPolicy must be Never")
        if doc["kind"] == "Job" and not doc["spec"].get("activeDeadlineSeconds"):
            out.append(f"{where}: Job spec has no activeDeadlineSeconds")
    if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
        for _, spec in pod_specs(doc):
            for c in spec["containers"]:
                for probe in ("readinessProbe", "livenessProbe"):
                    if probe not in c:
                        out.append(f"{where} container {c['name']}: no {probe}")
    for labels, spec in pod_specs(doc):
        if labels.get("envgym.io/role") in SANDBOX_ROLES:
            for c in spec["containers"]:
                if "readinessProbe" not in c:
                    out.append(f"{where} container {c['name']}: sandbox server has no readinessProbe")
    return out


def selector_matches(selector: Doc, labels: dict[str, str]) -> bool:
    """Kubernetes LabelSelector semantics (matchLabels AND matchExpressions)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def egress_violations(docs: list[Doc]) -> list[str]:
    """Every pod that runs the sandbox server is selected by a deny-all-egress NetworkPolicy in its namespace."""
    deny_all = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and "Egress" in d["spec"].get("policyTypes", [])
        and not d["spec"].get("egress")
    ]
    out: list[str] = []
    for doc in docs:
        namespace = doc["metadata"].get("namespace")
        for labels, _ in pod_specs(doc):
            if labels.get("envgym.io/role") not in SANDBOX_ROLES:
                continue
            covered = any(
                p["metadata"].get("namespace") == namespace
                and selector_matches(p["spec"]["podSelector"], labels)
                for p in deny_all
            )
            if not covered:
                out.append(
                    f"{name_of(doc)} in namespace {namespace}: no deny-all egress NetworkPolicy selects it"
                )
    return out


def namespace_violations(docs: list[Doc]) -> list[str]:
    """Every namespace the overlay creates enforces Pod Security `restricted`; objects land in those."""
    created = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Namespace"}
    out = [
        f"Namespace/{name}: pod-security.kubernetes.io/enforce is not restricted"
        for name, ns in created.items()
        if ns["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce") != "restricted"
    ]
    out.extend(
        f"{name_of(d)}: namespace {d['metadata'].get('namespace')} is not created by the overlay"
        for d in docs
        if d["kind"] != "Namespace" and d["metadata"].get("namespace") not in created
    )
    return out


def all_violations(docs: list[Doc]) -> list[str]:
    out: list[str] = []
    for doc in docs:
        out += privilege_violations(doc) + resource_violations(doc) + lifetime_violations(doc)
    return out + egress_violations(docs) + namespace_violations(docs)
