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

from envgym.deploy import K8S_DIR
from envgym.sandbox.k8s_pods import parse_quantity

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
    """Every pod that runs the sandbox server is selected by a deny-all-egress NetworkPolicy in its namespace,
    and by no policy that allows any egress (policies add up: one allow rule anywhere opens it)."""
    egress = [
        d for d in docs if d["kind"] == "NetworkPolicy" and "Egress" in d["spec"].get("policyTypes", [])
    ]
    out: list[str] = []
    for doc in docs:
        namespace = doc["metadata"].get("namespace")
        for labels, _ in pod_specs(doc):
            if labels.get("envgym.io/role") not in SANDBOX_ROLES:
                continue
            selecting = [
                p
                for p in egress
                if p["metadata"].get("namespace") == namespace
                and selector_matches(p["spec"]["podSelector"], labels)
            ]
            if not any(not p["spec"].get("egress") for p in selecting):
                out.append(
                    f"{name_of(doc)} in namespace {namespace}: no deny-all egress NetworkPolicy selects it"
                )
            out.extend(
                f"{name_of(doc)} in namespace {namespace}: NetworkPolicy/{p['metadata']['name']} allows it egress"
                for p in selecting
                if p["spec"].get("egress")
            )
    return out


def default_deny_violations(docs: list[Doc]) -> list[str]:
    """Every namespace the overlay creates has a policy denying all ingress and egress to every pod, and no
    egress rule anywhere opens every destination on every port."""
    out: list[str] = []
    for ns in (d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"):
        denies = any(
            d["kind"] == "NetworkPolicy"
            and d["metadata"].get("namespace") == ns
            and d["spec"].get("podSelector") == {}
            and {"Ingress", "Egress"} <= set(d["spec"].get("policyTypes", []))
            and not d["spec"].get("ingress")
            and not d["spec"].get("egress")
            for d in docs
        )
        if not denies:
            out.append(f"Namespace/{ns}: no NetworkPolicy denies all ingress and egress by default")
    for d in docs:
        if d["kind"] != "NetworkPolicy":
            continue
        for i, rule in enumerate(d["spec"].get("egress", [])):
            if not rule.get("to") and not rule.get("ports"):
                out.append(f"{name_of(d)}: egress rule {i} allows every destination on every port")
            elif not rule.get("to"):  # issue 41: clients reached any address on 443 and 6443
                ports = ", ".join(str(p.get("port", "any")) for p in rule["ports"])
                out.append(f"{name_of(d)}: egress rule {i} allows every destination on port {ports}")
            elif any(peer.get("ipBlock", {}).get("cidr", "").endswith("/0") for peer in rule["to"]):
                out.append(f"{name_of(d)}: egress rule {i} allows every address (an ipBlock /0)")
    return out


def secret_read_violations(docs: list[Doc]) -> list[str]:
    """No Role or ClusterRole may get, list or watch Secrets: a list returns every Secret's data, tokens included."""
    out: list[str] = []
    for d in docs:
        if d["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in d.get("rules", []):
            if {"secrets", "*"} & set(rule.get("resources", [])):
                reading = sorted({"get", "list", "watch", "*"} & set(rule.get("verbs", [])))
                if reading:
                    out.append(f"{name_of(d)}: may {', '.join(reading)} Secrets (their data)")
    return out


def secret_env_violations(doc: Doc) -> list[str]:
    """Secrets reach containers as mounted files, never environment variables (readable in /proc/<pid>/environ)."""
    out: list[str] = []
    for _, spec in pod_specs(doc):
        for c in spec.get("initContainers", []) + spec["containers"]:
            for var in c.get("env", []):
                if "secretKeyRef" in var.get("valueFrom", {}):
                    out.append(f"{name_of(doc)} container {c['name']}: env {var['name']} comes from a Secret")
            for source in c.get("envFrom", []):
                if "secretRef" in source:
                    out.append(f"{name_of(doc)} container {c['name']}: envFrom a Secret")
    return out


def env_server_violations(doc: Doc) -> list[str]:
    """Env-server pods run `envgym serve` (env endpoints only; never the sandbox server, which offers exec),
    with `--token-file` on a mounted Secret volume."""
    out: list[str] = []
    for labels, spec in pod_specs(doc):
        if labels.get("envgym.io/role") != "env-server":
            continue
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            argv = [*c.get("command", []), *c.get("args", [])]
            where = f"{name_of(doc)} container {c['name']}"
            if argv[:2] != ["envgym", "serve"] or "envgym.sandbox.server" in argv:
                out.append(f"{where}: runs {argv[:3]}, not `envgym serve` (env endpoints only)")
            token = argv[argv.index("--token-file") + 1] if "--token-file" in argv[:-1] else None
            mounts = [
                m
                for m in c.get("volumeMounts", [])
                if token is not None
                and token.startswith(m["mountPath"].rstrip("/") + "/")
                and "secret" in volumes.get(m["name"], {})
            ]
            if not mounts:
                out.append(f"{where}: no --token-file on a mounted Secret volume")
    return out


SESSION_IDLE_S = 600
"""`envgym serve --session-idle` default: session affinity must last at least this long."""


def session_violations(docs: list[Doc]) -> list[str]:
    """Env-server sessions live in one pod's memory: every Service in front of env servers pins a client to one
    pod (ClientIP affinity outlasting the session idle time) and is not headless (DNS would not pin)."""
    out: list[str] = []
    for d in docs:
        if d["kind"] != "Service" or d["spec"].get("selector", {}).get("app.kubernetes.io/name") != (
            "envgym-env-server"
        ):
            continue
        spec = d["spec"]
        if spec.get("clusterIP") == "None":
            out.append(
                f"{name_of(d)}: headless, so nothing pins a client's requests to the pod holding its session"
            )
        timeout = spec.get("sessionAffinityConfig", {}).get("clientIP", {}).get("timeoutSeconds", 10800)
        if spec.get("sessionAffinity") != "ClientIP" or timeout < SESSION_IDLE_S:
            out.append(f"{name_of(d)}: needs sessionAffinity ClientIP lasting >= {SESSION_IDLE_S}s")
    return out


def autoscaling_violations(docs: list[Doc]) -> list[str]:
    """A Deployment the HPA scales sets no `replicas` (each apply would reset the HPA's count), and every
    Deployment has a PodDisruptionBudget that still lets a node drain (maxUnavailable, or minAvailable below
    the HPA's minimum)."""
    out: list[str] = []
    hpas = {
        (d["metadata"].get("namespace"), d["spec"]["scaleTargetRef"]["name"]): d
        for d in docs
        if d["kind"] == "HorizontalPodAutoscaler"
    }
    for d in docs:
        if d["kind"] != "Deployment":
            continue
        key = (d["metadata"].get("namespace"), d["metadata"]["name"])
        hpa = hpas.get(key)
        if hpa is not None and "replicas" in d["spec"]:
            out.append(
                f"{name_of(d)}: sets replicas although HorizontalPodAutoscaler/{hpa['metadata']['name']} scales it"
            )
        labels = d["spec"]["template"]["metadata"].get("labels", {})
        pdbs = [
            p
            for p in docs
            if p["kind"] == "PodDisruptionBudget"
            and p["metadata"].get("namespace") == key[0]
            and selector_matches(p["spec"]["selector"], labels)
        ]
        if not pdbs:
            out.append(f"{name_of(d)}: no PodDisruptionBudget selects its pods")
        minimum = hpa["spec"].get("minReplicas", 1) if hpa else d["spec"].get("replicas", 1)
        for p in pdbs:
            available = p["spec"].get("minAvailable")
            if isinstance(available, int) and available >= minimum:
                out.append(f"{name_of(p)}: minAvailable {available} >= {minimum} replicas blocks every drain")
    return out


SANDBOX_QUOTA_SHARE = 0.5
"""The share of the quota's limits.cpu and limits.memory left for sandbox pods when the rest runs at full scale."""


def quota_violations(docs: list[Doc]) -> list[str]:
    """Env servers at the HPA's maximum plus the trainer Job fit in (1 - SANDBOX_QUOTA_SHARE) of the
    ResourceQuota's limits, leaving the rest for sandbox pods."""
    out: list[str] = []
    for quota in (d for d in docs if d["kind"] == "ResourceQuota"):
        namespace = quota["metadata"].get("namespace")
        hpas = {
            h["spec"]["scaleTargetRef"]["name"]: h["spec"]["maxReplicas"]
            for h in docs
            if h["kind"] == "HorizontalPodAutoscaler" and h["metadata"].get("namespace") == namespace
        }
        for resource in ("cpu", "memory"):
            hard = quota["spec"]["hard"].get(f"limits.{resource}")
            if hard is None:
                continue
            used = 0.0
            for d in docs:
                if d["metadata"].get("namespace") != namespace or d["kind"] not in ("Deployment", "Job"):
                    continue
                count = (
                    hpas.get(d["metadata"]["name"], d["spec"].get("replicas", 1))
                    if d["kind"] == "Deployment"
                    else d["spec"].get("parallelism", 1)
                )
                for _, spec in pod_specs(d):
                    per_pod = sum(
                        parse_quantity(str(c.get("resources", {}).get("limits", {}).get(resource, "0")))
                        for c in spec["containers"]
                    )
                    used += count * per_pod
            allowed = (1 - SANDBOX_QUOTA_SHARE) * parse_quantity(str(hard))
            unit, scale = ("Gi", 2**30) if resource == "memory" else ("", 1)
            if used > allowed:
                out.append(
                    f"{name_of(quota)}: env servers at their HPA maximum and the trainer take {used / scale:g}{unit} "
                    f"of limits.{resource} {hard}; at most {allowed / scale:g}{unit} may, to leave room for sandboxes"
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
    from .trainer_checks import trainer_violations  # it builds on the helpers above
    out: list[str] = []
    for doc in docs:
        out += privilege_violations(doc) + resource_violations(doc) + lifetime_violations(doc)
        out += secret_env_violations(doc) + env_server_violations(doc)
    return (
        out
        + egress_violations(docs)
        + namespace_violations(docs)
        + default_deny_violations(docs)
        + secret_read_violations(docs)
        + session_violations(docs)
        + autoscaling_violations(docs)
        + quota_violations(docs)
        + trainer_violations(docs)
    )
