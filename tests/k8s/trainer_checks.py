"""Offline checks on the rendered trainer Job: the Indexed Job, torchrun rendezvous, headless Service, peer
NetworkPolicies and env-server endpoints a multi-pod data-parallel run needs (issue 18)."""

from __future__ import annotations

from .manifest_checks import Doc, name_of, pod_specs, selector_matches

COMPLETION_INDEX = {
    "metadata.annotations['batch.kubernetes.io/job-completion-index']",
    "metadata.labels['batch.kubernetes.io/job-completion-index']",
}
"""Downward-API paths of an Indexed Job pod's index (the controller also sets JOB_COMPLETION_INDEX)."""


def _flags(argv: list[str]) -> dict[str, str]:
    """`--name=value` and `--name value` flags of a torchrun command line, up to the script (`-m` or a path)."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        name, sep, value = argv[i].partition("=")
        if not sep and i + 1 < len(argv):
            value, i = argv[i + 1], i + 1
        flags[name.replace("_", "-")] = value
        i += 1
    return flags


def trainer_violations(docs: list[Doc]) -> list[str]:
    """A trainer Job (pods labelled envgym.io/role=trainer) is an Indexed Job with parallelism = completions
    = torchrun's --nnodes, each pod's --node-rank is its completion index, the rendezvous is rank 0's pod by its
    stable name <job>-0.<subdomain>, the subdomain is a headless Service selecting the pods, and NetworkPolicies
    let trainer pods reach each other (gloo/nccl use ports chosen at run time, so not one port only)."""
    out: list[str] = []
    for job in (d for d in docs if d["kind"] == "Job"):
        for labels, spec in pod_specs(job):
            if labels.get("envgym.io/role") != "trainer":
                continue
            where, name, namespace = name_of(job), job["metadata"]["name"], job["metadata"].get("namespace")
            n = job["spec"].get("completions")
            if job["spec"].get("completionMode") != "Indexed":
                out.append(f"{where}: completionMode must be Indexed (each pod's index is its node rank)")
            if n is None or job["spec"].get("parallelism") != n:
                out.append(f"{where}: parallelism {job['spec'].get('parallelism')} != completions {n}: "
                           "a static rendezvous waits for every rank at once")
            container = spec["containers"][0]
            argv = [*container.get("command", []), *container.get("args", [])]
            if argv[:1] != ["torchrun"]:
                out.append(f"{where}: the entry point is {argv[:1]}, not torchrun")
                continue
            flags = _flags(argv[1:])
            if flags.get("--nnodes") != str(n):
                out.append(f"{where}: torchrun --nnodes={flags.get('--nnodes')} but completions is {n}")
            env = {v["name"]: v.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for v in container.get("env", [])}
            rank = flags.get("--node-rank", "")
            var = rank[2:-1] if rank.startswith("$(") and rank.endswith(")") else None
            if var is None or (var != "JOB_COMPLETION_INDEX" and env.get(var) not in COMPLETION_INDEX):
                out.append(f"{where}: --node-rank={rank!r} is not the pod's completion index")
            subdomain = spec.get("subdomain")
            host = flags.get("--master-addr") or flags.get("--rdzv-endpoint", "").rsplit(":", 1)[0]
            if subdomain is None or host != f"{name}-0.{subdomain}":
                out.append(f"{where}: rendezvous host {host!r} is not rank 0's pod {name}-0.{subdomain}")
            headless = [
                d for d in docs
                if d["kind"] == "Service" and d["metadata"]["name"] == subdomain
                and d["metadata"].get("namespace") == namespace and d["spec"].get("clusterIP") == "None"
                and selector_matches({"matchLabels": d["spec"].get("selector", {})}, labels)
            ]
            if not headless:
                out.append(f"{where}: no headless Service {subdomain!r} selecting its pods gives them DNS names")
            out.extend(_env_server_endpoint_violations(where, docs, namespace, spec, container, argv))
            for kind, rule_key, peer_key in (("Ingress", "ingress", "from"), ("Egress", "egress", "to")):
                opened = any(
                    p["kind"] == "NetworkPolicy" and p["metadata"].get("namespace") == namespace
                    and kind in p["spec"].get("policyTypes", []) and selector_matches(p["spec"]["podSelector"], labels)
                    and any(not rule.get("ports") and any(
                        set(peer) == {"podSelector"} and selector_matches(peer["podSelector"], labels)
                        for peer in rule.get(peer_key, [])) for rule in p["spec"].get(rule_key, []))
                    for p in docs
                )
                if not opened:
                    out.append(f"{where}: no NetworkPolicy allows {kind.lower()} between trainer pods on every port")
    return out


def _env_server_endpoint_violations(
    where: str, docs: list[Doc], namespace: str | None, spec: Doc, container: Doc, argv: list[str]
) -> list[str]:
    """The trainer finds its env servers through the env-server Service (`env_server_url`) and reads their
    token from a mounted Secret (`env_server_token_file`)."""
    settings = dict(a.removeprefix("--set=").split("=", 1) for a in argv if a.startswith("--set=") and "=" in a[6:])
    url = settings.get("env_server_url", "")
    host, _, port = url.removeprefix("http://").partition(":")
    served = any(
        d["kind"] == "Service" and d["metadata"]["name"] == host and d["metadata"].get("namespace") == namespace
        and d["spec"].get("selector", {}).get("app.kubernetes.io/name") == "envgym-env-server"
        and any(str(p["port"]) == port for p in d["spec"].get("ports", []))
        for d in docs
    )
    out = [] if served else [f"{where}: env_server_url {url!r} is not the env-server Service and its port"]
    token = settings.get("env_server_token_file", "")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    if not any(token.startswith(m["mountPath"].rstrip("/") + "/") and "secret" in volumes.get(m["name"], {})
               for m in container.get("volumeMounts", [])):
        out.append(f"{where}: env_server_token_file {token!r} is not on a mounted Secret volume")
    return out
