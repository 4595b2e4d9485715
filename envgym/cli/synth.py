"""`envgym synth run | harvest-mcp | rollouts | export | difficulty | judge | stats`: the synthesizer's commands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from envgym.cli.common import CliError, add_json_flag, print_json, stderr
from envgym.llm import ChatModel


def _print(summary: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        print_json(summary)
        return
    table = Table("metric", "value", title=title)
    for key, value in summary.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict | list) else str(value))
    Console().print(table)


def _print_mcp(per_server: dict[str, Any]) -> None:
    """Per MCP server: the tools mapped (operation, entity), those not mapped and why, and the verified tasks."""
    table = Table("server", "env", "mapped", "not mapped (why)", "tasks verified", title="MCP-grounded worlds",
                  show_lines=True)
    for server, info in per_server.items():
        table.add_row(server, info["env"] or "-", "\n".join(f"{t}: {op}" for t, op in info["tools_mapped"].items()),
                      "\n".join(f"{t}: {why}" for t, why in info["tools_not_mapped"].items()),
                      f"{info['tasks_verified']} / {info['tasks_sampled']}")
    Console().print(table)


def _model(args: argparse.Namespace, cache: Path) -> ChatModel | None:
    """The proposing/paraphrasing model behind the record/replay cache, or None for the procedural path."""
    if args.llm is None:
        return None
    from envgym.llm import CachedChatModel, load_chat_model

    if args.llm == "openai":
        if not args.llm_model:
            raise CliError("--llm openai needs --llm-model NAME (and usually --base-url)")
        inner = load_chat_model(f"openai:{args.llm_model}", **({"base_url": args.base_url} if args.base_url else {}))
    else:
        inner = load_chat_model("local")
    return CachedChatModel(inner, cache, mode=args.llm_mode)


def cmd_run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from synth.pipeline import SYNTH_DIR, RunMismatchError, SynthConfig, run_pipeline

    if args.live:
        return _run_live(args)
    mcp_specs = _mcp_sources(args)
    if args.domains == 0 and not mcp_specs:
        raise CliError("--domains 0 leaves nothing to synthesize; give --mcp or --mcp-server, or some domains")
    spec = None if args.llm is None else (args.llm if args.llm == "local" else f"openai:{args.llm_model}")
    config = SynthConfig(seed=args.seed, domains=max(args.domains, 1), tasks_per_env=args.tasks_per_env, llm=spec)
    model = _model(args, Path(args.out) / SYNTH_DIR / "llm_cache.jsonl")
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=args.json, console=stderr) as bar:
        jobs: dict[str, Any] = {}

        def advance(stage: str, total: int) -> None:
            if stage not in jobs:
                jobs[stage] = bar.add_task(stage, total=total)
            bar.advance(jobs[stage])

        summary = {"out": args.out}
        if args.domains > 0:
            try:
                summary = run_pipeline(config, args.out, advance, model=model, workers=args.workers)
            except RunMismatchError as exc:  # the user's --out, not a bug: one line, exit 2
                raise CliError(str(exc)) from None
        if mcp_specs:
            from synth.stages.mcp import run_mcp

            summary["mcp"] = run_mcp(mcp_specs, args.out, config.seed, config.tasks_per_env, config.max_steps,
                                     advance)
    from synth.stats import collect_stats, judge_counts

    # Where the tasks came from, and what the judge filter kept (None until `synth judge` has run on this folder).
    summary["tasks_by_source"] = collect_stats(args.out)["tasks_by_source"]
    summary["judge"] = judge_counts(args.out)
    if not args.json and "mcp" in summary:
        _print_mcp(summary.pop("mcp"))
    _print(summary, args.json, "synth run")
    return 0


def _probe(text: str) -> Any:
    """`--state-probe 'TOOL {"arg": ...}'` as a tool call (arguments default to none)."""
    from envgym.world.spec import ToolCall

    name, _, arguments = text.strip().partition(" ")
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        raise CliError(f"--state-probe {text!r}: the arguments after the tool name must be a JSON object ({exc})"
                       ) from None
    if not name or not isinstance(parsed, dict):
        raise CliError(f"--state-probe {text!r}: expected a tool name and a JSON object of its arguments")
    return ToolCall(name=name, arguments=parsed)


def _run_live(args: argparse.Namespace) -> int:
    """`--live`: one world per --mcp-server whose tools are the real server, a fresh one per episode."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from synth.mcp_harvest import HarvestError, parse_env
    from synth.stages.mcp_live import LiveServer, run_mcp_live

    if not args.mcp_server or args.mcp or args.domains not in (0, 20):
        raise CliError("--live builds worlds from running servers only: give --mcp-server CMD (repeatable), "
                       "no --mcp files and no --domains")
    try:
        env = parse_env(args.env)
    except HarvestError as exc:
        raise CliError(str(exc)) from None
    probes = [_probe(text) for text in args.state_probe]
    servers = [LiveServer(command, env, list(args.state_exclude), args.state_template, probes)
               for command in args.mcp_server]
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=args.json, console=stderr) as bar:
        jobs: dict[str, Any] = {}

        def advance(stage: str, total: int) -> None:
            if stage not in jobs:
                jobs[stage] = bar.add_task(stage, total=total)
            bar.advance(jobs[stage])

        summary = run_mcp_live(servers, args.out, args.seed, args.tasks_per_env, advance=advance,
                               timeout_s=args.timeout)
    if args.json:
        print_json({"out": args.out, "mcp_live": summary})
        return 0
    table = Table("server", "env", "tools used", "not used (why)", "tasks", "calls/task", "start p50/p95 s",
                  title="live MCP worlds", show_lines=True)
    for server, info in summary.items():
        if "tools_used" not in info:
            table.add_row(server, "-", "-", f"refused: {info.get('refused')}", "0", "-", "-")
            continue
        start = info.get("server_start_s") or {}
        table.add_row(server, info.get("env") or "-", "\n".join(info["tools_used"]),
                      "\n".join(f"{t}: {why}" for t, why in info["tools_not_used"].items()),
                      f"{info['tasks_kept']} / {info['tasks_sampled']}",
                      ",".join(map(str, info["calls_per_task"])), f"{start.get('p50', '-')}/{start.get('p95', '-')}")
    Console().print(table)
    return 0


def _harvest(servers: list[str], env_pairs: list[str], timeout_s: float) -> list[Any]:
    """Harvest the servers' tool specs; a server that fails to start is one CLI error line naming it and why."""
    from synth.mcp_harvest import HarvestError, harvest, parse_env

    try:
        return harvest(servers, timeout_s=timeout_s, env=parse_env(env_pairs))
    except HarvestError as exc:
        raise CliError(f"HarvestError: {exc}") from None


def _mcp_sources(args: argparse.Namespace) -> list[Any]:
    """Tool specs from harvest files (--mcp) and from servers harvested now (--mcp-server)."""
    from synth.stages.mcp import read_harvest

    specs: list[Any] = []
    for path in args.mcp:
        try:
            specs.extend(read_harvest(path))
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if args.mcp_server:
        specs.extend(_harvest(args.mcp_server, args.env, args.timeout))
    return specs


def cmd_harvest(args: argparse.Namespace) -> int:
    from synth.store import with_id, write_jsonl

    specs = _harvest(args.server, args.env, args.timeout)
    records = [with_id({"spec": s.model_dump(mode="json", exclude_defaults=True)}) for s in specs]
    write_jsonl(Path(args.out), records)
    servers = sorted({" ".join(s.source["server"]) for s in specs if s.source})
    _print({"out": args.out, "servers": len(args.server), "tools": len(specs),
            "by_server": {srv: sum(" ".join(s.source["server"]) == srv for s in specs if s.source) for srv in servers}},
           args.json, "harvest-mcp")
    return 0


def cmd_rollouts(args: argparse.Namespace) -> int:
    from synth.rollouts import passes, rollout

    kwargs: dict[str, Any] = {}
    user, user_model = "scripted", None
    if args.user_llm is not None:
        from synth.pipeline import SYNTH_DIR

        # The user simulator is a model too: through the record/replay cache, like every model in synth.
        user = "llm"
        user_model = _model(argparse.Namespace(**{**vars(args), "llm": args.user_llm}),
                            Path(args.dir) / SYNTH_DIR / "llm_cache.jsonl")
    if args.policy == "openai":
        kwargs = {"model": args.llm_model, "base_url": args.base_url}
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]rollouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=args.json, console=stderr) as bar:
        job = bar.add_task("rollouts", total=None)

        def advance(total: int) -> None:
            bar.update(job, total=total, advance=1)

        records = rollout(args.dir, args.out, policy=args.policy, n=args.n, seed=args.seed,
                          failure_rate=args.failure_rate, advance=advance, user=user, user_model=user_model,
                          **kwargs)
    rewards = [r["reward"] for r in records]
    _print({"out": args.out, "trajectories": len(records), "passed": sum(passes(r) for r in records),
            "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else 0.0}, args.json, "rollouts")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from synth.rollouts import export_sft

    _print({"out": args.out, **export_sft(args.rollouts, args.out)}, args.json, "export")
    return 0


def cmd_difficulty(args: argparse.Namespace) -> int:
    if args.policy is None:
        if args.rollouts is None:
            raise CliError("synth difficulty needs --rollouts FILE (recorded rollouts) or --policy NAME (roll out now)")
        from synth.difficulty import curriculum

        _print({"out": args.out, **curriculum(args.dir, args.rollouts, args.out, band=args.band, seed=args.seed)},
               args.json, "difficulty")
        return 0
    if args.rollouts is not None:
        raise CliError("give --rollouts or --policy, not both (--policy writes its rollouts into OUT/_synth)")
    if args.policy == "openai" and not args.llm_model:
        raise CliError("--policy openai needs --llm-model NAME (and usually --base-url)")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from synth.learner import measure_and_build

    kwargs: dict[str, Any] = {}
    if args.policy in ("local", "openai"):
        kwargs = {"temperature": args.temperature, "max_tokens": args.max_tokens}
    if args.policy == "openai":
        kwargs |= {"model": args.llm_model, "base_url": args.base_url}
    if args.policy == "local":
        # The samples of a task, and the tasks of an env, share the policy and tool schemas at the head of the
        # prompt: on CPU, recomputing them is most of a turn.
        kwargs["reuse_prefix"] = True
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=args.json, console=stderr) as bar:
        job = bar.add_task(f"rollouts ({args.policy})", total=None)

        def advance(total: int) -> None:
            bar.update(job, total=total, advance=1)

        try:
            summary = measure_and_build(args.dir, args.out, policy=args.policy, samples=args.samples,
                                        seed=args.seed, band=args.band, max_tasks=args.max_tasks,
                                        max_steps=args.max_steps, failure_rate=args.failure_rate, advance=advance,
                                        **kwargs)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    _print({"out": args.out, **summary}, args.json, "difficulty")
    return 0


def cmd_judge(args: argparse.Namespace) -> int:
    from synth.pipeline import SYNTH_DIR
    from synth.stages.judge import judge_filter

    model = _model(args, Path(args.cache) if args.cache else Path(args.dir) / SYNTH_DIR / "llm_cache.jsonl")
    assert model is not None  # --llm is required here
    _print({"out": args.out, **judge_filter(args.dir, args.rollouts, args.out, model, args.threshold)}, args.json,
           "judge")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from synth.report import write_report
    from synth.stats import collect_stats

    if not Path(args.dir).is_dir():
        raise CliError(f"{args.dir}: no such folder of synthesized environments")
    stats = collect_stats(args.dir)
    if args.report:
        stats["report"] = write_report(stats, args.report, f"synth stats {args.dir}")
    _print(stats, args.json, f"synth stats {args.dir}")
    if not args.json:
        curve = Table("domains", "distinct tool signatures", title="signatures by number of domains")
        for n, v in stats["signature_curve"].items():
            curve.add_row(n, str(v))
        Console().print(curve)
    return 0


def _llm_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--llm-model", default=None, help="model name on the OpenAI-compatible server")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible server URL")


def _env_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment variable for the MCP servers (repeatable; otherwise only HOME, PATH, SHELL, "
                        "TERM and the like reach them)")


def register(sub: Any) -> None:
    parser = sub.add_parser("synth", help="synthesize environments, harvest MCP tools, roll out and export data")
    synth = parser.add_subparsers(dest="synth_command", required=True, metavar="STAGE")

    p = synth.add_parser("run", help="run (or resume) the offline pipeline into a folder of environments")
    p.add_argument("--domains", type=int, default=20, help="procedural domains (0: only the MCP worlds)")
    p.add_argument("--mcp", action="append", default=[], metavar="HARVEST.jsonl",
                   help="worlds from harvested MCP tools (a file of `synth harvest-mcp`; repeatable)")
    p.add_argument("--mcp-server", action="append", default=[], metavar="CMD",
                   help="harvest this stdio MCP server now and synthesize a world from its tools (repeatable)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds an MCP server may take to list its tools")
    _env_option(p)
    p.add_argument("--live", action="store_true",
                   help="worlds whose tools are the real --mcp-server, a fresh one per episode over its own state "
                        "folder ({state} in the command or an --env value; else the server's working directory); "
                        "tasks come from exploring the server's tools")
    p.add_argument("--state-exclude", action="append", default=[], metavar="GLOB",
                   help="with --live: paths of the state folder grading ignores (e.g. '.backups/*'; repeatable)")
    p.add_argument("--state-probe", action="append", default=[], metavar="'TOOL {JSON}'",
                   help="with --live: a read call whose result joins the graded state (e.g. 'git_status "
                        "{\"repo_path\": \".\"}' where the folder's bytes differ per copy; repeatable)")
    p.add_argument("--state-template", default=None, metavar="DIR",
                   help="with --live: a folder the servers' state starts from before seeding (default: empty)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--tasks-per-env", type=int, default=24)
    p.add_argument("--workers", type=int, default=1, help="processes for the tools and tasks stages")
    p.add_argument("--llm", choices=["local", "openai"], default=None,
                   help="let a model name tools and reword tool summaries and task openings, behind quality filters "
                        "(default: procedural)")
    p.add_argument("--llm-mode", choices=["auto", "record", "replay"], default="auto",
                   help="record/replay cache mode; replay never calls the model")
    _llm_options(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_run)

    p = synth.add_parser("harvest-mcp", help="import the tools of MCP servers (stdio) as tool specs")
    p.add_argument("--server", action="append", required=True, help='server command, e.g. "mcp-server-time"')
    p.add_argument("--out", required=True, help="JSONL file of tool specs")
    p.add_argument("--timeout", type=float, default=60.0)
    _env_option(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_harvest)

    p = synth.add_parser("rollouts", help="roll a policy out on every task of a folder of environments")
    p.add_argument("dir")
    p.add_argument("--out", required=True, help="JSONL file of trajectories (appended; resumable)")
    p.add_argument("--policy", default="fair", choices=["fair", "oracle", "random", "refuse", "local", "openai"],
                   help="fair: the planner that uses only what the conversation shows (the SFT source)")
    p.add_argument("--n", type=int, default=4, help="rollouts per task")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--failure-rate", type=float, default=0.1, help="chance each tool call fails transiently")
    p.add_argument("--user-llm", choices=["local", "openai"], default=None,
                   help="a model plays the user (default: the scripted user)")
    p.add_argument("--llm-mode", choices=["auto", "record", "replay"], default="auto",
                   help="record/replay cache mode of the user model; replay never calls it")
    _llm_options(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_rollouts)

    p = synth.add_parser("export", help="keep trajectories passing the verifiable rubric; write SFT JSONL")
    p.add_argument("rollouts")
    p.add_argument("--out", required=True)
    add_json_flag(p)
    p.set_defaults(func=cmd_export)

    p = synth.add_parser("difficulty", help="select tasks near 50%% success and harden saturated ones")
    p.add_argument("dir")
    p.add_argument("--rollouts", default=None, help="recorded rollouts (`synth rollouts`) to measure success on")
    p.add_argument("--policy", default=None, choices=["local", "openai", "fair", "oracle", "random", "refuse"],
                   help="roll this policy out now, --samples times per task, and mark every task by its success "
                        "(Wilson interval) instead of reading --rollouts")
    p.add_argument("--samples", type=int, default=4, help="rollouts per task with --policy")
    p.add_argument("--max-tasks", type=int, default=None, help="measure only the first N tasks (folder order)")
    p.add_argument("--max-steps", type=int, default=None, help="turns per rollout (default: the task's own)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per model turn (local, openai)")
    p.add_argument("--temperature", type=float, default=0.7,
                   help="sampling temperature of the model (local, openai); 0 makes every sample the same")
    p.add_argument("--failure-rate", type=float, default=0.0, help="chance each tool call fails transiently")
    p.add_argument("--out", required=True)
    p.add_argument("--band", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    _llm_options(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_difficulty)

    p = synth.add_parser("judge", help="keep verified trajectories that an LLM judge scores at or above a threshold")
    p.add_argument("dir", help="the folder of environments the rollouts ran on")
    p.add_argument("--rollouts", required=True)
    p.add_argument("--out", required=True, help="JSONL file of the kept trajectories (with their judge score)")
    p.add_argument("--llm", choices=["local", "openai"], required=True, help="the judge model")
    p.add_argument("--llm-mode", choices=["auto", "record", "replay"], default="auto",
                   help="record/replay cache mode; replay never calls the model")
    p.add_argument("--cache", default=None, help="the record/replay cache (default DIR/_synth/llm_cache.jsonl)")
    p.add_argument("--threshold", type=float, default=0.5)
    _llm_options(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_judge)

    p = synth.add_parser("stats", help="counts and diversity of a folder of synthesized environments")
    p.add_argument("dir")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="also write synth_stats.md, synth_stats.json and signature_curve.png into DIR")
    add_json_flag(p)
    p.set_defaults(func=cmd_stats)
