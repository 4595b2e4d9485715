"""`envgym k8s render|apply|status|reap`: the shipped manifests and the sandbox pods of a cluster.

`render` works offline. `apply`, `status` and `reap` use the current kube context (or --context /
--kubeconfig), or in-cluster credentials when run inside a pod.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from envgym import deploy
from envgym.cli.common import add_json_flag, print_json, stderr

# Secrets the manifests reference but never contain: created with a random token by `apply` when missing.
_TOKEN_SECRETS = {
    "envgym-env-server-token": "bearer token of the env-server Deployment",
    "envgym-sandbox-token": "bearer token shared by agent-sandbox warm-pool pods",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "k8s", help="render/apply the Kubernetes manifests; list and reap sandbox pods"
    )
    sub = parser.add_subparsers(dest="k8s_command", required=True)

    render = sub.add_parser("render", help="render an overlay to YAML (offline)")
    render.add_argument(
        "overlay", nargs="?", default="dev", help="overlay name under k8s/overlays, or a directory"
    )
    render.add_argument(
        "--engine",
        choices=["auto", "kubectl", "python"],
        default="auto",
        help="auto: kubectl kustomize when kubectl is installed, else the built-in renderer",
    )
    render.add_argument("--k8s-dir", type=Path, default=deploy.K8S_DIR, help="the k8s/ directory")
    render.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    add_json_flag(render)
    render.set_defaults(func=_render)

    apply = sub.add_parser("apply", help="server-side apply an overlay to the current kube context")
    apply.add_argument("overlay", nargs="?", default="dev")
    apply.add_argument("--engine", choices=["auto", "kubectl", "python"], default="auto")
    apply.add_argument("--k8s-dir", type=Path, default=deploy.K8S_DIR)
    _add_cluster_args(apply, namespace=False)
    apply.add_argument(
        "--dry-run", action="store_true", help="send with dryRun=All: the server validates only"
    )
    add_json_flag(apply)
    apply.set_defaults(func=_apply)

    status = sub.add_parser("status", help="list envgym sandbox pods in a namespace")
    _add_cluster_args(status)
    add_json_flag(status)
    status.set_defaults(func=_status)

    reap = sub.add_parser("reap", help="delete finished, expired, orphaned or old sandbox pods")
    _add_cluster_args(reap)
    reap.add_argument("--run-id", help="delete every pod of this run and its owner ConfigMap")
    reap.add_argument("--older-than", type=float, metavar="SECONDS", help="also delete pods older than this")
    add_json_flag(reap)
    reap.set_defaults(func=_reap)


def _add_cluster_args(parser: argparse.ArgumentParser, *, namespace: bool = True) -> None:
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)"
    )
    if namespace:
        parser.add_argument("-n", "--namespace", default="envgym")


def _api_client(args: argparse.Namespace) -> Any:
    from kubernetes import config

    from envgym.sandbox.kubernetes import load_api_client

    if args.kubeconfig is not None:
        return config.new_client_from_config(config_file=str(args.kubeconfig), context=args.context)
    return load_api_client(args.context)


def _render(args: argparse.Namespace) -> int:
    directory = deploy.resolve_overlay(args.overlay, args.k8s_dir)
    docs = deploy.render(directory, args.engine)
    if args.output:
        args.output.write_text(deploy.dump(docs))
    if args.json:
        # Written to a file, the summary says where; otherwise the documents themselves are the result.
        body: dict[str, Any] = {"output": str(args.output)} if args.output else {"documents": docs}
        print_json({"overlay": args.overlay, "directory": str(directory), "count": len(docs), **body})
    elif not args.output:
        sys.stdout.write(deploy.dump(docs))
    return 0


def _apply(args: argparse.Namespace) -> int:
    from kubernetes import dynamic
    from kubernetes.client.exceptions import ApiException

    docs = deploy.render(deploy.resolve_overlay(args.overlay, args.k8s_dir), args.engine)
    client = dynamic.DynamicClient(_api_client(args))
    dry_run = "All" if args.dry_run else None
    created: list[str] = []
    with Progress(console=stderr, disable=args.json) as progress:
        task = progress.add_task("server-side apply", total=len(docs))
        for doc in docs:
            resource = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            namespace = doc["metadata"].get("namespace")
            try:
                resource.server_side_apply(
                    body=doc,
                    name=doc["metadata"]["name"],
                    namespace=namespace,
                    field_manager="envgym",
                    force_conflicts=True,
                    dry_run=dry_run,
                )
            except ApiException as exc:
                print(
                    f"envgym k8s apply: {doc['kind']}/{doc['metadata']['name']}: {exc.reason}: {exc.body}",
                    file=sys.stderr,
                )
                return 1
            progress.advance(task)
    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    secrets_api = client.resources.get(api_version="v1", kind="Secret")
    for namespace in sorted(namespaces):
        for name, purpose in _TOKEN_SECRETS.items():
            try:
                secrets_api.get(name=name, namespace=namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                body = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "annotations": {"envgym.io/purpose": purpose},
                    },
                    "stringData": {"token": secrets.token_urlsafe(32)},
                }
                secrets_api.create(body=body, namespace=namespace, dry_run=dry_run)
                created.append(f"{namespace}/{name}")
    if args.json:
        print_json({"overlay": args.overlay, "dry_run": args.dry_run, "applied": len(docs),
                    "objects": [f"{d['kind']}/{d['metadata']['name']}" for d in docs], "secrets_created": created})
    else:
        print(f"applied {len(docs)} objects from overlay {args.overlay}" + (" (dry run)" if args.dry_run else ""))
    return 0


def _backend(args: argparse.Namespace) -> Any:
    from envgym.sandbox.kubernetes import KubernetesBackend

    return KubernetesBackend(namespace=args.namespace, api_client=_api_client(args))


def _status(args: argparse.Namespace) -> int:
    pods = _backend(args).list_sandboxes()
    if args.json:
        print_json({"namespace": args.namespace, "pods": [vars(p) for p in pods]})
        return 0
    table = Table(title=f"envgym sandbox pods in {args.namespace}")
    for column in ("pod", "sandbox", "run", "phase", "ready", "age (s)"):
        table.add_column(column)
    for p in pods:
        table.add_row(p.name, p.sandbox_id, p.run_id, p.phase, "yes" if p.ready else "no", f"{p.age_s:.0f}")
    Console().print(table)
    return 0


def _reap(args: argparse.Namespace) -> int:
    removed = _backend(args).reap(run_id=args.run_id, older_than_s=args.older_than)
    if args.json:
        print_json({"namespace": args.namespace, "removed": removed})
    else:
        print(f"removed {len(removed)} sandbox pod(s) from {args.namespace}: {' '.join(removed) or '-'}")
    return 0
