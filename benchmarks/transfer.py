"""Does SFT on synthesized worlds transfer to tasks others wrote? (issue 39 part 4)

    python -m benchmarks.transfer --out runs/transfer [--model local] [--domains 24] [--eval-tasks 30] ...

Three arms, each SFT'd from the same base model on the same number of training tokens of fair-agent conversations
(the synthesizer's fair planner: it sees only the user's words and what tools return):

- `broad`: the current synthesizer, `--domains` domains of `--tasks-per-domain` tasks (seed `--seed`);
- `single`: the current synthesizer, ONE domain (same seed) with as many tasks as `broad` has in all;
- `older`: the synthesizer of commit 276fd1e (the end of round two), the same seed and sizes, generated once and
  committed as `benchmarks/transfer_data/` (README there says how).

Training tokens are the target (loss) tokens of the assistant turns, counted with the policy's tokenizer
(`envgym.train.sft.conversation_samples`). Each arm's conversations, with every one that contains anything of BFCL's
dropped first (`benchmarks.transfer_leak`: tool names, backend names, question text), are taken in a seeded order
until their target tokens reach `--token-budget` and their samples fill whole batches; each arm then trains one pass
over exactly those samples (`steps = samples / batch`), so arms differ by less than one batch of conversations: the
report gives each arm's exact counts (and all tokens, prompts included).

Evaluation (greedy, episode seeds `--eval-seed`, sampled by `--eval-sample-seed`, never trained on): the bundled
retail and travel tasks and BFCL simple_python and multiple (`--eval-tasks` each), and `--multi-turn` BFCL
multi_turn_base entries (with limits of their own: BFCL's multi-turn prompts and entries are longer). The base model and every arm play the same tasks; the report has Wilson intervals, the paired
per-task change of each arm against the base and of `broad` against each control (bootstrap interval, sign test:
`envgym.train.recipe`). Everything is bound by samples, steps and tokens, never by time. Written to `--out`:
`arms/<arm>.jsonl.gz` (the exact conversations trained on), `arms/<arm>.pt` (its weights after SFT), `report.json`
(after each stage) and `results.md`. `--resume` goes on from a report, and may add eval sets after its own: each
model evaluated before then plays only those.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from benchmarks.transfer_leak import bfcl_vocabulary, find_leaks
from envgym.train.recipe import paired, summarize

ROOT = Path(__file__).resolve().parents[1]
OLDER_DATA = ROOT / "benchmarks" / "transfer_data" / "older_synth_276fd1e_seed11.jsonl.gz"
ARMS = ("broad", "single", "older")
MULTI_TURN_TURNS = 20
MULTI_TURN_TOKENS = 8192
WEIGHTS = "{arm}.pt"  # an arm's weights after SFT, under `arms/`: later eval sets play it without training it again


class EvalSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str
    env: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    tasks: int = Field(ge=0, description="a seeded sample of this many of the env's tasks")
    max_turns: int | None = Field(None, ge=1, description="this set's turn cap (default: the run's `max_turns`)")
    max_sequence_tokens: int | None = Field(None, ge=64, description="this set's sample cap (default: the run's)")


class TransferConfig(BaseModel):
    """One transfer run; every size is a count (tasks, tokens, steps), so results do not depend on machine load."""

    model_config = ConfigDict(extra="forbid")
    model: str = "local"
    seed: int = Field(11, description="synthesis seed of the broad and single arms (the older data used it too)")
    domains: int = Field(24, ge=1, description="domains of the broad arm")
    tasks_per_domain: int = Field(24, ge=1)
    older_data: str = str(OLDER_DATA)
    token_budget: int = Field(20_000, ge=1, description="target (loss) tokens each arm trains on")
    sft_batch: int = Field(4, ge=1)
    learning_rate: float = 5e-5
    sft_seed: int = 0
    policy_seed: int = 0
    eval_sets: list[EvalSpec] = Field(default_factory=list)
    eval_seed: int = 0
    eval_sample_seed: int = 0
    max_new_tokens: int = 96
    max_turns: int = 6
    max_sequence_tokens: int = 4096
    max_train_tokens: int = Field(8192, ge=64, description=(
        "conversations with a token sample longer than this are not trained on, in every arm alike: SFT's "
        "activation memory grows about 1.2 MB a token on SmolLM2-135M (two 6k-token conversations in one "
        "micro-batch took 18.9 GB); with micro-batches of 1 an 8k sample needs about 10 GB"))
    sft_micro_batch: int = Field(1, ge=1, description="samples per forward/backward inside an SFT batch (memory)")
    bootstrap: int = 2000
    threads: int = 1
    arms: list[str] = Field(default_factory=lambda: list(ARMS))
    output_dir: str = "runs/transfer"


def default_eval_sets(tasks: int, multi_turn: int) -> list[EvalSpec]:
    sets = [EvalSpec(label="retail", env="envgym/retail-v0", tasks=tasks),
            EvalSpec(label="travel", env="envgym/travel-v0", tasks=tasks),
            EvalSpec(label="bfcl simple_python", env="envgym/bfcl-v0", kwargs={"category": "simple_python"},
                     tasks=tasks),
            EvalSpec(label="bfcl multiple", env="envgym/bfcl-v0", kwargs={"category": "multiple"}, tasks=tasks)]
    if multi_turn:
        # BFCL's multi-turn prompts (persona, rules and two to four backends' function docs) are 2.6k-5.7k tokens
        # (median 4.4k) and an entry needs 4-16 turns (a call or a turn's closing answer each; median 10): under the
        # single-turn sets' 6 turns and 4,096 tokens most entries could not be finished by any policy. SmolLM2's
        # context is 8,192 tokens; 20 turns is BFCL's own step limit for one user turn.
        sets.append(EvalSpec(label="bfcl multi_turn_base", env="envgym/bfcl-multi-turn-v0",
                             kwargs={"category": "multi_turn_base"}, tasks=multi_turn, max_turns=MULTI_TURN_TURNS,
                             max_sequence_tokens=MULTI_TURN_TOKENS))
    return sets


# ---------------------------------------------------------------------------------------------------- the arms' data


def _fair_demos(folder: Path) -> list[dict[str, Any]]:
    from synth.subsets import fair_demonstrations

    ids = [json.loads(line)["id"] for line in (folder / "tasks.jsonl").read_text().splitlines() if line.strip()]
    demos = fair_demonstrations(folder, ids)
    return [{"domain": folder.name, **d} for d in demos]


def synthesized_demos(seed: int, domains: int, tasks_per_domain: int, out: Path) -> list[dict[str, Any]]:
    """The current synthesizer's fair conversations of every task of `domains` domains, in domain then task order."""
    from synth.pipeline import SynthConfig, run_pipeline

    run_pipeline(SynthConfig(seed=seed, domains=domains, tasks_per_env=tasks_per_domain), out)
    folders = sorted(p for p in out.iterdir() if (p / "world.yaml").exists())
    return [d for folder in folders for d in _fair_demos(folder)]


def read_demos(path: str | Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_demos(path: Path, demos: Sequence[dict[str, Any]]) -> None:
    """Gzip JSONL without a time stamp: the same demonstrations give the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as handle:
        handle.write("".join(json.dumps(d, sort_keys=True) + "\n" for d in demos).encode())


def arm_pool(arm: str, config: TransferConfig, work: Path) -> list[dict[str, Any]]:
    if arm == "broad":
        return synthesized_demos(config.seed, config.domains, config.tasks_per_domain, work / "broad")
    if arm == "single":
        return synthesized_demos(config.seed, 1, config.domains * config.tasks_per_domain, work / "single")
    if arm == "older":
        return read_demos(config.older_data)
    raise ValueError(f"unknown arm {arm!r}; expected one of {', '.join(ARMS)}")


def token_counts(tokenizer: Any, demo: dict[str, Any]) -> tuple[list[Any], int]:
    """(token samples, target tokens) of one conversation, tokenized as SFT trains on it."""
    from envgym.train.sft import conversation_samples

    samples = conversation_samples(tokenizer, demo["messages"], demo.get("tools"), tokenizer.eos_token_id)
    return samples, sum(s.trainable_tokens for s in samples)


def select_to_budget(pool: Sequence[dict[str, Any]], count: Callable[[dict[str, Any]], tuple[list[Any], int]],
                     budget: int, batch: int, seed: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """Conversations of `pool` in a seeded order, counted (`count`: samples, target tokens) as they are taken, until
    their target tokens reach `budget` and their samples fill whole batches of `batch`: nothing taken is left
    untrained, and arms differ by less than `batch` conversations. A conversation `count` gives no samples is
    skipped (not taken). Raises ValueError if the pool runs out first."""
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    demos: list[dict[str, Any]] = []
    samples: list[Any] = []
    total = 0
    for index in order:
        if total >= budget and samples and len(samples) % batch == 0:
            return demos, samples
        found, tokens = count(pool[index])
        if not found:
            continue
        demos.append(pool[index])
        samples.extend(found)
        total += tokens
    if total >= budget and samples and len(samples) % batch == 0:
        return demos, samples
    raise ValueError(f"the pool's {len(pool)} conversations hold {total} target tokens in {len(samples)} samples: "
                     f"under the budget of {budget} in whole batches of {batch}")


# ---------------------------------------------------------------------------------------------------- evaluation


def eval_task_ids(spec: EvalSpec, env: Any, seed: int) -> list[str]:
    """A seeded sample of `spec.tasks` of the env's tasks, in the env's order (BFCL: `choose_tasks`)."""
    if spec.env.startswith("envgym/bfcl"):
        from envgym.integrations.bfcl.evaluate import choose_tasks

        return choose_tasks(str(spec.kwargs["category"]), spec.tasks, seed)[0]
    ids = [t.id for t in env.unwrapped.data.tasks]
    if spec.tasks > len(ids):
        raise ValueError(f"eval set {spec.label}: {len(ids)} tasks, {spec.tasks} asked for")
    chosen = set(random.Random(f"{seed}:{spec.env}").sample(ids, spec.tasks))
    return [t for t in ids if t in chosen]


class Evaluator:
    """The eval sets' envs and task ids, made once and played by each policy."""

    def __init__(self, config: TransferConfig) -> None:
        from envgym.train.recipe import EvalSet, eval_set_tasks
        from envgym.train.rollout import RolloutLimits

        self.config = config
        self.sets: dict[str, tuple[list[Any], list[str]]] = {}
        self.limits: dict[str, RolloutLimits] = {}
        for spec in config.eval_sets:
            envs, _ = eval_set_tasks(EvalSet(env=spec.env, kwargs=spec.kwargs, tasks=0))
            self.sets[spec.label] = (envs, eval_task_ids(spec, envs[0], config.eval_sample_seed))
            self.limits[spec.label] = RolloutLimits(
                config.max_new_tokens, spec.max_sequence_tokens or config.max_sequence_tokens,
                spec.max_turns or config.max_turns)

    def task_ids(self) -> dict[str, list[str]]:
        return {label: ids for label, (_, ids) in self.sets.items()}

    def run(self, model: Any, tokenizer: Any, console: Console, labels: Sequence[str] | None = None
            ) -> dict[str, list[bool]]:
        """Each eval set's (or only `labels`') per-task greedy successes, in the sets' order."""
        from envgym.train.generation import CachedSampler
        from envgym.train.recipe import evaluate_tasks

        sampler = CachedSampler(model, tokenizer)
        results = {}
        for label, (envs, ids) in self.sets.items():
            if labels is not None and label not in labels:
                continue
            player = types.SimpleNamespace(sampler=sampler, limits=self.limits[label])
            clock = time.perf_counter()
            results[label] = evaluate_tasks(player, envs, ids, self.config.eval_seed)
            console.print(f"  {label}: {sum(results[label])}/{len(ids)} ({time.perf_counter() - clock:.0f} s)")
        bundled = [label for label in ("retail", "travel") if label in results]
        if len(bundled) == 2:
            results["retail+travel"] = results["retail"] + results["travel"]
        return results


# ---------------------------------------------------------------------------------------------------- the run


# What an arm's data must match for its earlier evaluation to be reused by `--resume`.
_ARM_IDENTITY = ("demonstrations", "samples", "steps", "target_tokens", "all_tokens")


def _resumable(out: Path, config: TransferConfig) -> dict[str, Any]:
    """The report an interrupted run of `config` left in `out`; refused when it was another configuration. The
    resumed run may add eval sets after the report's (each model evaluated before then plays only those), and may
    use another torch thread count."""
    path = out / "report.json"
    if not path.exists():
        raise ValueError(f"--resume: {path} does not exist (nothing to resume; run without --resume)")
    previous = json.loads(path.read_text())
    then, now = dict(previous.get("config", {})), config.model_dump()
    # Sets are compared as validated now: a report written before a field existed reads it at its default.
    old_sets = [EvalSpec.model_validate(spec).model_dump() for spec in then.pop("eval_sets", [])]
    new_sets = now.pop("eval_sets")
    differ = sorted(k for k in then.keys() | now.keys() if then.get(k) != now.get(k) and k != "threads")
    if new_sets[: len(old_sets)] != old_sets:
        differ.append("eval_sets (the report's sets must be the first, unchanged)")
    if differ:
        raise ValueError(f"--resume: {path} was written with another configuration (differs in: {', '.join(differ)})")
    return dict(previous)


def run_transfer(config: TransferConfig, console: Console | None = None, resume: bool = False) -> dict[str, Any]:
    """Build, check and select every arm's data, evaluate the base model, SFT and evaluate each arm; returns the
    report (also `report.json`, rewritten after each stage, and `results.md`).

    With `resume`, an interrupted run goes on: the arms' data are built again (deterministic; an arm whose counts
    differ from the report's is an error), and every model already evaluated in the report (the base, an arm after
    its SFT) is kept rather than trained and played again, so a run of hours can be finished in parts."""
    import torch

    from envgym.train.policy import load_policy
    from envgym.train.sft import supervised_fine_tune

    console = console or Console(stderr=True)
    torch.set_num_threads(config.threads)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    started, started_at = time.perf_counter(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_start = list(os.getloadavg())
    previous = _resumable(out, config) if resume else {}
    # Each invocation's wall time and load (a report from before `parts` existed counts as one part).
    earlier_parts = previous.get("parts") or ([{k: previous.get(k) for k in ("load_start", "load_end", "wall_s")}]
                                              if "wall_s" in previous else [])
    report: dict[str, Any] = {"config": config.model_dump(), "load_start": list(os.getloadavg()), "arms": {},
                              "evaluations": {}, "per_task": {}}
    if previous:
        report["resumed"] = previous.get("resumed", 0) + 1
        report["load_start"] = previous.get("load_start")
    vocabulary = bfcl_vocabulary()
    _, tokenizer = load_policy(config.model, config.policy_seed)
    selected: dict[str, list[Any]] = {}
    for arm in config.arms:
        clock = time.perf_counter()
        pool = arm_pool(arm, config, out / "synth")
        leaked = [bool(find_leaks([d], vocabulary)) for d in pool]
        clean = [d for d, bad in zip(pool, leaked, strict=True) if not bad]
        too_long: list[str] = []

        def count(demo: dict[str, Any], too_long: list[str] = too_long) -> tuple[list[Any], int]:
            samples, tokens = token_counts(tokenizer, demo)
            if any(len(s.token_ids) > config.max_train_tokens for s in samples):
                too_long.append(str(demo.get("domain")))
                return [], 0
            return samples, tokens

        demos, samples = select_to_budget(clean, count, config.token_budget, config.sft_batch, config.sft_seed)
        leaks = find_leaks(demos, vocabulary)
        if leaks:  # cannot happen after the filter above; the trained data is checked itself all the same
            raise RuntimeError(f"arm {arm}: BFCL data in training data: {leaks[:3]}")
        write_demos(out / "arms" / f"{arm}.jsonl.gz", demos)
        selected[arm] = samples
        report["arms"][arm] = {
            "pool": len(pool), "pool_domains": len({d.get("domain") for d in pool}),
            "dropped_for_bfcl": sum(leaked), "skipped_too_long": len(too_long),
            "dropped_domains": sorted({str(d.get("domain")) for d, bad in zip(pool, leaked, strict=True) if bad}),
            "demonstrations": len(demos), "domains": len({d.get("domain") for d in demos}), "samples": len(samples),
            "steps": len(samples) // config.sft_batch, "target_tokens": sum(s.trainable_tokens for s in samples),
            "all_tokens": sum(len(s.token_ids) for s in samples), "build_s": round(time.perf_counter() - clock, 1)}
        before = previous.get("arms", {}).get(arm)
        if before is not None:
            changed = [k for k in _ARM_IDENTITY if before.get(k) != report["arms"][arm][k]]
            if changed:
                raise ValueError(f"--resume: arm {arm}'s data differ from the report's ({', '.join(changed)})")
            for key in ("losses", "sft_s"):
                if key in before:
                    report["arms"][arm][key] = before[key]
        console.print(f"[bold]{arm}[/]: {report['arms'][arm]}")
    report["token_budget"] = config.token_budget
    _write(out, report)

    evaluator = Evaluator(config)
    report["eval_tasks"] = evaluator.task_ids()
    earlier_tasks = previous.get("eval_tasks", {})
    if any(report["eval_tasks"].get(label) != ids for label, ids in earlier_tasks.items()):
        raise ValueError("--resume: the evaluation tasks differ from the report's")

    labels = [spec.label for spec in config.eval_sets]

    def carried(name: str) -> list[str]:
        """Carry over what the resumed run measured of `name`; returns the eval sets `name` has still to play."""
        before = previous.get("evaluations", {}).get(name)
        if before is None:
            return labels
        report["evaluations"][name] = dict(before)
        for key, runs in previous.get("per_task", {}).items():
            if name in runs:
                report["per_task"].setdefault(key, {})[name] = runs[name]
        missing = [label for label in labels if label not in before]
        console.print(f"[bold]{name}[/]: evaluated before, kept" + (f"; to play: {', '.join(missing)}" if missing
                                                                       else ""))
        return missing

    def measure(name: str, model: Any, sets: Sequence[str]) -> None:
        clock = time.perf_counter()
        console.print(f"[bold]evaluating {name}[/]: {', '.join(sets)}")
        results = evaluator.run(model, tokenizer, console, sets)
        evaluation = report["evaluations"].setdefault(name, {})
        evaluation.update({k: summarize(v) for k, v in results.items()})
        evaluation["seconds"] = round(evaluation.get("seconds", 0.0) + time.perf_counter() - clock, 1)
        for key, values in results.items():
            report["per_task"].setdefault(key, {})[name] = values
        _write(out, report)

    def forget(name: str) -> None:
        report["evaluations"].pop(name, None)
        for runs in report["per_task"].values():
            runs.pop(name, None)

    to_play = carried("base")
    if to_play:
        base, _ = load_policy(config.model, config.policy_seed)
        measure("base", base, to_play)
        del base
    for arm in config.arms:
        to_play = carried(arm)
        if not to_play:
            continue
        model, _ = load_policy(config.model, config.policy_seed)
        weights = out / "arms" / WEIGHTS.format(arm=arm)
        if arm in previous.get("evaluations", {}) and weights.exists():
            model.load_state_dict(torch.load(weights, map_location="cpu"))
            console.print(f"[bold]{arm}[/]: weights after SFT read from {weights}")
        else:
            clock = time.perf_counter()
            steps = report["arms"][arm]["steps"]
            losses = [round(x, 4) for x in supervised_fine_tune(
                model, selected[arm], steps=steps, batch_size=config.sft_batch, learning_rate=config.learning_rate,
                pad_token_id=_pad_id(tokenizer), seed=config.sft_seed, micro_batch_size=config.sft_micro_batch,
                console=console)]
            seconds = round(time.perf_counter() - clock, 1)
            torch.save(model.state_dict(), weights)
            before = report["arms"][arm].get("losses")
            if before is None:
                report["arms"][arm].update({"losses": losses, "sft_s": seconds})
            elif losses == before:  # trained again to play new sets: the same model, so the earlier results stand
                report["arms"][arm]["sft_again_s"] = seconds
            else:  # another model than the one evaluated (e.g. other numerics): it plays every set again
                console.print(f"[yellow]{arm}: trained again, its losses differ from the report's; every eval set "
                              f"is played again[/]")
                report["arms"][arm].update({"losses": losses, "sft_s": seconds, "losses_before": before})
                forget(arm)
                to_play = labels
        measure(arm, model, to_play)
    report["paired"] = paired_table(report["per_task"], config.arms, config.bootstrap)
    report["load_end"] = list(os.getloadavg())
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["parts"] = [*earlier_parts, {"started": started_at, "threads": config.threads, "load_start": load_start,
                                        "load_end": report["load_end"], "wall_s": report["wall_s"]}]
    _write(out, report)
    (out / "results.md").write_text(results_markdown(report))
    return report


def _pad_id(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


def paired_table(per_task: dict[str, dict[str, list[bool]]], arms: Sequence[str], resamples: int
                 ) -> dict[str, dict[str, Any]]:
    """Per eval set: each arm against the base model, and broad against each control, on the same tasks."""
    table: dict[str, dict[str, Any]] = {}
    for key, runs in per_task.items():
        row = {f"{arm} - base": paired(runs["base"], runs[arm], resamples) for arm in arms if arm in runs}
        if "broad" in runs:
            row |= {f"broad - {arm}": paired(runs[arm], runs["broad"], resamples)
                    for arm in arms if arm != "broad" and arm in runs}
        table[key] = row
    return table


def _write(out: Path, report: dict[str, Any]) -> None:
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")


def results_markdown(report: dict[str, Any]) -> str:
    """The arms' data, and per eval set each policy's success and the paired changes."""
    lines = ["# Transfer: SFT on synthesized worlds, evaluated on tasks others wrote", "",
             f"Training tokens per arm (target tokens): budget {report['token_budget']}.", "",
             "| arm | demonstrations | domains | dropped for BFCL | samples | steps | target tokens | all tokens |",
             "|---|---|---|---|---|---|---|---|"]
    for arm, a in report["arms"].items():
        lines.append(f"| {arm} | {a['demonstrations']} | {a['domains']} | {a['dropped_for_bfcl']} | {a['samples']} | "
                     f"{a['steps']} | {a['target_tokens']} | {a['all_tokens']} |")
    lines += ["", "| eval set | " + " | ".join(report["evaluations"]) + " |",
              "|---|" + "---|" * len(report["evaluations"])]
    for key in report["per_task"]:
        cells = []
        for name in report["evaluations"]:
            r = report["evaluations"][name].get(key)
            cells.append("not played" if r is None else
                         f"{r['successes']}/{r['tasks']} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += ["", "| eval set | comparison | change (points) | 95% bootstrap | gained / lost | sign p |",
              "|---|---|---|---|---|---|"]
    for key, row in report["paired"].items():
        for name, p in row.items():
            low, high = p["bootstrap95_points"]
            lines.append(f"| {key} | {name} | {p['change_points']:+.1f} | [{low:+.1f}, {high:+.1f}] | "
                         f"{p['gained']} / {p['lost']} | {p['sign_test_p']} |")
    lines += [""] + [f"Part {i}: wall time {part['wall_s']} s; load average {part['load_start']} at the start, "
                     f"{part['load_end']} at the end." for i, part in enumerate(report["parts"], 1)] + [""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SFT arms on synthesized worlds, evaluated on BFCL and bundled tasks")
    parser.add_argument("--out", default="runs/transfer")
    parser.add_argument("--model", default="local")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--domains", type=int, default=24)
    parser.add_argument("--tasks-per-domain", type=int, default=24)
    parser.add_argument("--token-budget", type=int, default=20_000)
    parser.add_argument("--sft-batch", type=int, default=4)
    parser.add_argument("--eval-tasks", type=int, default=30, help="per eval set (retail, travel, simple, multiple)")
    parser.add_argument("--multi-turn", type=int, default=0, help="BFCL multi_turn_base entries (minutes each on CPU)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-train-tokens", type=int, default=8192,
                        help="skip training conversations with a sample longer than this (SFT memory), in every arm")
    parser.add_argument("--resume", action="store_true",
                        help="go on from the report.json an interrupted run with the same flags left in --out")
    args = parser.parse_args(argv)
    config = TransferConfig(model=args.model, seed=args.seed, domains=args.domains,
                            tasks_per_domain=args.tasks_per_domain, token_budget=args.token_budget,
                            sft_batch=args.sft_batch, eval_sets=default_eval_sets(args.eval_tasks, args.multi_turn),
                            max_new_tokens=args.max_new_tokens, max_turns=args.max_turns,
                            arms=args.arms.split(","), threads=args.threads, output_dir=args.out,
                            max_train_tokens=args.max_train_tokens)
    try:
        report = run_transfer(config, resume=args.resume)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"paired": report["paired"], "arms": {a: {k: v for k, v in r.items() if k != "losses"}
                                                           for a, r in report["arms"].items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
