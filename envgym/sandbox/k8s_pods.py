"""What a sandbox pod is: its body made from the PodTemplate, and how its status reads (ready, stuck, why)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from envgym.sandbox.base import (
    LABEL_CREATED_AT,
    LABEL_EXPIRES_AT,
    LABEL_OWNER,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
    sandbox_labels,
)
from envgym.sandbox.errors import InvalidRequestError, SandboxUnavailableError
from envgym.sandbox.spec import SandboxSpec

Doc = dict[str, Any]
TOKEN_SECRET_VOLUME = "envgym-token-secret"
"""The PodTemplate's Secret volume for the token; the backend points it at each pod's own Secret."""
TOKEN_DIR_VOLUME = "envgym-token"
"""The memory-backed emptyDir the init container copies the token into (not resized with the spec's disk)."""
# The pod deadline backs up the server's own ttl exit, so it fires a little later.
_DEADLINE_MARGIN_S = 30


FINISHED = ("Succeeded", "Failed")


# Container waiting reasons that do not clear by waiting: fail the start now, with the reason.
_STUCK = {
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
}


@dataclass(frozen=True)
class PodInfo:
    """What `status` and `reap` report about one sandbox pod."""

    name: str
    sandbox_id: str
    run_id: str
    phase: str
    ready: bool
    age_s: float
    expires_at: float


def secret_name(sandbox_id: str) -> str:
    return f"envgym-sbx-{sandbox_id}-token"


def apply_limits(container: Doc, spec: SandboxSpec) -> None:
    """Limits from the spec; requests from the template, capped at the limits."""
    limits = {
        "cpu": f"{round(spec.cpu * 1000)}m",
        "memory": f"{spec.memory_mb}Mi",
        "ephemeral-storage": f"{2 * spec.disk_mb}Mi",
    }
    resources = container.setdefault("resources", {})
    requests = resources.get("requests", {})
    resources["limits"] = limits
    resources["requests"] = {k: smaller(v, limits[k]) if k in limits else v for k, v in requests.items()}


_SUFFIX = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}


def parse_quantity(value: str) -> float:
    """A Kubernetes quantity (`250m`, `2Gi`, `4`) as a number of units (cores, bytes)."""
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * _SUFFIX[suffix]
    return float(value)


def smaller(a: str, b: str) -> str:
    return a if parse_quantity(a) <= parse_quantity(b) else b


def is_ready(pod: k8s.V1Pod) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def started(name: str, pod: k8s.V1Pod) -> bool:
    """True when the pod is Ready with an IP; raises when it finished or is stuck with a reason."""
    phase = pod.status.phase if pod.status else None
    if phase in FINISHED:
        raise SandboxUnavailableError(f"pod {name} {phase} before it became ready: {finish_reason(pod)}")
    stuck = stuck_reason(pod)
    if stuck is not None:
        raise SandboxUnavailableError(f"pod {name} cannot start: {stuck}")
    return is_ready(pod) and bool(pod_ip(pod))


def pod_ip(pod: k8s.V1Pod) -> str:
    return str(pod.status.pod_ip) if pod.status and pod.status.pod_ip else ""


def stuck_reason(pod: k8s.V1Pod) -> str | None:
    """Why a Pending pod will not start by waiting (unschedulable, image pull, container config), or None."""
    status = pod.status
    if status is None:
        return None
    for condition in status.conditions or []:
        if (
            condition.type == "PodScheduled"
            and condition.status == "False"
            and condition.reason == "Unschedulable"
        ):
            return f"Unschedulable: {condition.message or 'no node fits'}"
    for c in [*(status.init_container_statuses or []), *(status.container_statuses or [])]:
        waiting = c.state.waiting if c.state else None
        if waiting is not None and waiting.reason in _STUCK:
            return f"container {c.name}: {waiting.reason}: {waiting.message or 'no message'}"
    return None


def describe_state(pod: k8s.V1Pod) -> str:
    """The pod's phase and the reasons it gives, for error messages."""
    status = pod.status
    if status is None:
        return "no status yet"
    parts = [status.phase or "Unknown"]
    parts += [
        f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason else "") for c in status.conditions or []
    ]
    for c in [*(status.init_container_statuses or []), *(status.container_statuses or [])]:
        if c.state and c.state.waiting and c.state.waiting.reason:
            parts.append(f"{c.name} waiting: {c.state.waiting.reason}")
    return ", ".join(parts)


def finish_reason(pod: k8s.V1Pod) -> str:
    status = pod.status
    reason = f"{status.reason or ''} {status.message or ''}".strip() if status else ""
    return reason or "no reason given"


def pod_info(pod: Doc, now: float) -> PodInfo:
    meta = pod["metadata"]
    labels = meta.get("labels", {})
    status = pod.get("status", {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
    created = float(labels.get(LABEL_CREATED_AT, now))
    return PodInfo(
        name=meta["name"],
        sandbox_id=labels.get(LABEL_SANDBOX_ID, meta["name"]),
        run_id=labels.get(LABEL_RUN_ID, ""),
        phase=status.get("phase", "Unknown"),
        ready=ready,
        age_s=now - created,
        expires_at=float(labels.get(LABEL_EXPIRES_AT, math.inf)),
    )


def pod_body(
    template: Doc,
    template_name: str,
    namespace: str,
    spec: SandboxSpec,
    *,
    sandbox_id: str,
    run_id: str,
    env_id: str | None,
    owner: Doc,
) -> Doc:
    """The pod for one sandbox: the PodTemplate's spec with the spec's limits, args, labels and token Secret."""
    labels = sandbox_labels(spec, sandbox_id, run_id)
    process = labels.pop(LABEL_OWNER)  # host:pid is not a valid label value
    meta = template.get("metadata", {})
    pod_spec = template["spec"]
    pod_spec["activeDeadlineSeconds"] = math.ceil(spec.ttl_s) + _DEADLINE_MARGIN_S
    container = pod_spec["containers"][0]
    if "image" in spec.model_fields_set:
        container["image"] = spec.image
    args = [
        *container.get("args", []),
        "--sandbox-id",
        sandbox_id,
        "--ttl",
        f"{spec.ttl_s:g}",
        "--timeout",
        f"{spec.timeout_s:g}",
        "--max-output",
        str(spec.max_output_bytes),
    ]
    if spec.idle_s is not None and env_id is None:
        args += ["--idle", f"{spec.idle_s:g}"]
    if env_id is not None:
        args += ["--env-id", env_id]
    container["args"] = args
    env = [*container.get("env", []), *({"name": k, "value": v} for k, v in sorted(spec.env.items()))]
    if env:
        container["env"] = env
    apply_limits(container, spec)
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    token_volume = volumes.get(TOKEN_SECRET_VOLUME, {})
    if "secret" not in token_volume:
        raise InvalidRequestError(
            f"PodTemplate {template_name}: no Secret volume {TOKEN_SECRET_VOLUME!r} to carry the sandbox "
            "token; apply the current k8s/ manifests (envgym k8s apply)"
        )
    token_volume["secret"]["secretName"] = secret_name(sandbox_id)
    for volume in volumes.values():
        if "emptyDir" in volume and volume["name"] != TOKEN_DIR_VOLUME:
            volume["emptyDir"]["sizeLimit"] = f"{spec.disk_mb}Mi"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"envgym-sbx-{sandbox_id}",
            "namespace": namespace,
            # The template's labels (envgym.io/role: sandbox) win over the spec's: the network policies select on them.
            "labels": {**labels, **meta.get("labels", {})},
            "annotations": {**meta.get("annotations", {}), LABEL_OWNER: process},
            "ownerReferences": [owner],
        },
        "spec": pod_spec,
    }
