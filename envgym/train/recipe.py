"""Recipes: one YAML file that reproduces a whole training experiment with `envgym train RECIPE.yaml`.

A recipe names where the tasks come from, how the policy is warm-started, how long GRPO runs and what is measured:

- `env`: one synthesized domain (`envgym synth run --seed SEED --domains 1`), cut by `synth.subsets.kind_subset` to
  the task kinds asked for, with `heldout` tasks of users no training task has;
- `transfer` (optional): more domains, synthesized from another seed, that are never trained on; `per_domain` of
  their tasks join the held-out evaluation;
- `warm_start` (optional): SFT on the fair planner's conversations of the training tasks, and with `domains` on
  `per_domain` conversations each of that many more domains (synthesized from `domains_seed`, none of them the
  training domain or a `transfer` domain: trained on, never evaluated); with `in_grpo`, GRPO draws its tasks from
  those domains too (`envgym.mixture.MixtureEnv`), the training domain's held-out users still never among them;
- `evaluate` (optional): tasks of other environments (bundled ones, BFCL's categories), never trained on, played at
  the same points as the held-out tasks;
- `minutes`: GRPO's time budget; `grpo`: the `GRPOConfig` fields (the env id, output folder and held-out count are
  filled in from the recipe).

Every held-out task is played greedily after the warm start (b) and after GRPO (c) (and on the base model (a) with
`evaluate_base`), always with the episode seeds of `eval_seed`, so runs that differ only in `grpo.seed` share the
split, the warm start and its evaluation: their difference is the GRPO sampling stream. The report gives, per task
set (the train domain's held-out users, the never-trained domains, all together), the success counts with Wilson
intervals and the paired comparison of (c) against (b): tasks gained and lost, the exact sign test, and a bootstrap
interval over tasks of the change. Written to `grpo.output_dir`: `report.json`, `results.md`, `metrics.jsonl`,
`reward_curve.png`, `suite.json`. `pool_reports` pools the per-task pairs of several runs (seeds), drawing tasks
whole in its bootstrap. A run that was killed goes on with `envgym train RECIPE --resume` (see `run_recipe`).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
from collections.abc import Callable, Collection, Hashable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from rich.console import Console

from envgym.train.config import GRPOConfig
from envgym.train.generation import float32


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SynthEnv(_Part):
    seed: int = Field(1, description="synthesis seed of the one training domain")
    tasks: int = Field(500, description="tasks synthesized in the domain before the cut to `kinds`")
    kinds: list[str] = Field(["lookup", "aggregate"], description="task kinds kept (synth.subsets.kind_subset)")
    heldout: int = Field(24, description="held-out tasks of the training domain (their users are never trained on)")
    split_seed: int = Field(0, description="the shuffle that picks the held-out users")


class Transfer(_Part):
    seed: int = Field(101, description="synthesis seed of the never-trained domains")
    domains: int = Field(3, description="how many never-trained domains")
    tasks: int = Field(300, description="tasks synthesized per domain before the cut")
    per_domain: int = Field(32, description="held-out tasks taken from each never-trained domain")


class EvalSet(_Part):
    """Tasks of another environment, evaluated beside the held-out tasks and never trained on: a bundled env
    (`envgym/retail-v0`), or BFCL (`envgym/bfcl-v0` with `kwargs: {category: simple_python}`)."""

    env: str = Field(description="gym id")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="gym.make keyword arguments")
    tasks: int = Field(20, description="the env's first N task ids (in its own order)")
    label: str | None = Field(None, description="the row's name (default: the id and kwargs)")

    def key(self) -> str:
        return self.label or self.env + "".join(f" {k}={v}" for k, v in sorted(self.kwargs.items()))


class WarmStart(_Part):
    steps: int = 8
    batch: int = 8
    learning_rate: float = 5e-5
    seed: int = Field(0, description="the SFT batches' shuffle (not the GRPO stream)")
    domains: int = Field(0, description="more synthesized domains whose fair demonstrations join the training "
                                        "domain's (never one that is evaluated)")
    domains_seed: int = Field(202, description="synthesis seed of those domains")
    domains_tasks: int = Field(150, description="tasks synthesized per such domain before the cut to `env.kinds`")
    per_domain: int = Field(8, description="demonstrations taken from each such domain")
    in_grpo: bool = Field(False, description="GRPO draws its tasks from those domains too (every task of theirs), "
                                             "not from the training domain alone (envgym.mixture)")

    @model_validator(mode="after")
    def _in_grpo_needs_domains(self) -> WarmStart:
        if self.in_grpo and not (self.domains > 0 and self.steps > 0):
            raise ValueError(f"in_grpo trains GRPO on the warm start's further domains, but domains is "
                             f"{self.domains} and steps {self.steps} (both must be > 0)")
        return self


class Recipe(_Part):
    name: str = "recipe"
    env: SynthEnv = SynthEnv()
    transfer: Transfer | None = None
    warm_start: WarmStart | None = WarmStart()
    evaluate: list[EvalSet] = Field(default_factory=list, description="other envs' tasks, evaluated at (b) and (c)")
    minutes: float = Field(60.0, description="GRPO time budget (evaluations and the warm start excluded)")
    evaluate_base: bool = False
    eval_seed: int = Field(0, description="episode seeds of every held-out evaluation")
    threads: int = Field(2, description="torch CPU threads")
    bootstrap: int = Field(2000, description="bootstrap resamples of the paired change")
    grpo: dict[str, Any] = Field(default_factory=dict, description="GRPOConfig fields")

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> Recipe:
        """Read a recipe; `overrides` maps dotted keys ("grpo.seed", "minutes") to values. Errors name the file.

        A recipe may start with `extends: OTHER.yaml` (a path relative to its own folder): it is that recipe with this
        file's fields laid over it, section by section (`grpo: {seed: 2}` changes one GRPO field, not the section)."""
        data = _recipe_data(Path(path), ())
        for key, value in (overrides or {}).items():
            node = data
            *parents, last = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"{path}: not a valid recipe: {problems}") from None


def _recipe_data(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """A recipe file's fields with its `extends` chain resolved (each file's fields over its base's)."""
    if path.resolve() in seen:
        raise ValueError(f"{path}: `extends` comes back to itself ({' -> '.join(str(p) for p in (*seen, path))})")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a recipe is a mapping, not {type(data).__name__}")
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ValueError(f"{path}: `extends` names one recipe file, got {base!r}")
    merged = _recipe_data(path.parent / base, (*seen, path.resolve()))
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def is_recipe(path: str | Path) -> bool:
    """A YAML file with a `grpo` section (or one that `extends` a recipe) is a recipe; a flat one is a GRPOConfig."""
    data = yaml.safe_load(Path(path).read_text())
    return isinstance(data, dict) and ("grpo" in data or "extends" in data)


# ---------------------------------------------------------------------------------------------------- statistics


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a success rate."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)


def sign_test(gained: int, lost: int) -> float:
    """Two-sided exact sign test of `gained` against `lost` discordant pairs (ties dropped), to 4 significant
    figures (a fixed number of decimals would print 18 against 0, p 7.6e-6, as 0)."""
    n = gained + lost
    if n == 0:
        return 1.0
    k = min(gained, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return float(f"{min(1.0, 2 * tail):.4g}")


def paired(before: Sequence[bool], after: Sequence[bool], resamples: int, seed: int = 0,
           clusters: Sequence[Hashable] | None = None) -> dict[str, Any]:
    """(c) against (b) on the same tasks: gained, lost, the sign test and a bootstrap 95% interval of the change in
    success rate (points). The bootstrap draws pairs; with `clusters` (one label per pair) it draws clusters whole
    instead, so pairs that are not independent (one task's pairs over several seeds) move together, and the sign
    test counts clusters whose pairs' net change is up or down (`clusters_better`, `clusters_worse`)."""
    assert len(before) == len(after)
    n = len(before)
    gained = sum(1 for b, a in zip(before, after, strict=True) if a and not b)
    lost = sum(1 for b, a in zip(before, after, strict=True) if b and not a)
    diffs = [int(a) - int(b) for b, a in zip(before, after, strict=True)]
    rng = random.Random(seed)
    if clusters is None:
        means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples)) if n else [0.0]
    else:
        assert len(clusters) == n
        groups: dict[Hashable, list[int]] = {}
        for label, diff in zip(clusters, diffs, strict=True):
            groups.setdefault(label, []).append(diff)
        sums, sizes = [sum(g) for g in groups.values()], [len(g) for g in groups.values()]
        k, means = len(sums), []
        for _ in range(resamples if n else 0):
            picks = [rng.randrange(k) for _ in range(k)]
            means.append(sum(sums[i] for i in picks) / sum(sizes[i] for i in picks))
        means = sorted(means) or [0.0]
    low, high = means[int(0.025 * (len(means) - 1))], means[int(0.975 * (len(means) - 1))]
    out = {"tasks": n, "gained": gained, "lost": lost, "change_points": round(100 * sum(diffs) / max(n, 1), 1),
           "bootstrap95_points": [round(100 * low, 1), round(100 * high, 1)], "sign_test_p": sign_test(gained, lost)}
    if clusters is not None:
        better, worse = sum(1 for t in sums if t > 0), sum(1 for t in sums if t < 0)
        out.update({"clusters": k, "clusters_better": better, "clusters_worse": worse,
                    "sign_test_p": sign_test(better, worse)})
    return out


def summarize(successes: Sequence[bool]) -> dict[str, Any]:
    wins = sum(successes)
    return {"tasks": len(successes), "successes": wins, "success_rate": round(wins / max(len(successes), 1), 4),
            "ci95": wilson(wins, len(successes))}


def pool_reports(reports: Sequence[dict[str, Any]], resamples: int = 2000) -> dict[str, Any]:
    """The per-task pairs of several runs (seeds) pooled: per task set, the mean change over runs, its spread, and
    the paired comparison over every (run, task) pair. The runs evaluated the same tasks, so the bootstrap draws
    tasks, each with its pairs of every run: seeds that agree task for task do not count as independent evidence."""
    out: dict[str, Any] = {"runs": len(reports)}
    for key in reports[0]["paired"]:
        before = [b for r in reports for b in r["per_task"][key]["b"]]
        after = [a for r in reports for a in r["per_task"][key]["c"]]
        tasks = [i for r in reports for i in range(len(r["per_task"][key]["b"]))]
        changes = [r["paired"][key]["change_points"] for r in reports]
        mean = sum(changes) / len(changes)
        spread = math.sqrt(sum((c - mean) ** 2 for c in changes) / max(len(changes) - 1, 1))
        out[key] = {"changes_points": changes, "mean_points": round(mean, 1), "sd_points": round(spread, 1),
                    "pooled": paired(before, after, resamples, clusters=tasks)}
    return out


# ---------------------------------------------------------------------------------------------------- the run


class Suite(NamedTuple):
    env_id: str
    summary: dict[str, Any]  # synth.subsets.kind_subset's
    heldout: list[str]  # task ids
    folder: Path


def _synth_suites(seed: int, domains: int, tasks: int, kinds: tuple[str, ...], heldout: int, split_seed: int,
                  out: Path, exclude: Collection[str] = ()) -> list[Suite]:
    """Synthesize `domains` domains (none named in `exclude`), cut each to `kinds` and register it, in name order."""
    from envgym.registry import env_id as id_of
    from envgym.registry import register_dir
    from synth.pipeline import SynthConfig, run_pipeline
    from synth.subsets import kind_subset

    raw = out / "synth"
    # Lookups and aggregates only: no draw goes to mechanism flows, so the cut keeps its size. One domain more for
    # each excluded one: a seed may draw any of them again.
    run_pipeline(SynthConfig(seed=seed, domains=domains + len(exclude), tasks_per_env=tasks, mechanism_share=0.0),
                 raw)
    sources = [p for p in sorted(raw.iterdir()) if (p / "world.yaml").exists() and p.name not in exclude][:domains]
    if len(sources) < domains:
        raise ValueError(f"synthesis seed {seed} gave {len(sources)} domains not among {sorted(exclude)}, "
                         f"{domains} asked for")
    found = []
    for source in sources:
        folder, suite = kind_subset(source, out / "suite", kinds=kinds, heldout=heldout, seed=split_seed)
        env_id = next(e for e in register_dir(folder.parent, override=True) if e == id_of(folder.name))
        held = _task_ids(folder)
        found.append(Suite(env_id, suite, held[-heldout:] if heldout else [], folder))
    return found


def _task_ids(folder: Path) -> list[str]:
    return [json.loads(line)["id"] for line in (folder / "tasks.jsonl").read_text().splitlines() if line.strip()]


def eval_set_tasks(spec: EvalSet) -> tuple[list[Any], list[str]]:
    """`spec`'s envs (one per lockstep slot: 8) and its first `tasks` task ids."""
    import gymnasium as gym

    import envgym  # noqa: F401  (registers envgym/* ids)

    envs = [gym.make(spec.env, **spec.kwargs) for _ in range(8)]
    env = envs[0].unwrapped
    if hasattr(env, "data") and hasattr(env.data, "tasks"):  # a folder env
        ids = [t.id for t in env.data.tasks]
    elif hasattr(env, "categories"):  # BFCL: its entries of the env's categories
        from envgym.integrations.bfcl import data

        ids = [t for c in env.categories for t in data.task_ids(c)]
    else:
        raise ValueError(f"evaluate: cannot list the tasks of {spec.env}")
    if len(ids) < spec.tasks:
        raise ValueError(f"evaluate: {spec.key()} has {len(ids)} tasks, {spec.tasks} asked for")
    return envs, ids[: spec.tasks]


def evaluate_tasks(trainer: Any, envs: Sequence[Any], task_ids: Sequence[str], seed: int) -> list[bool]:
    """Greedy success (reward >= 1) of each task, in batches of len(envs) episodes decoded in lockstep, in float32
    whatever the rollouts' `sampler_dtype` (so evaluations pair across runs that sampled in either)."""
    from envgym.train.rollout import run_group

    out: list[bool] = []
    with float32(trainer.sampler):
        for start in range(0, len(task_ids), len(envs)):
            chunk = list(task_ids[start : start + len(envs)])
            episodes = run_group(envs[: len(chunk)], chunk, trainer.sampler, trainer.limits, temperature=0.0,
                                 seed=seed + start)
            out.extend(e.reward >= 1.0 for e in episodes)
    return out


WARM_WEIGHTS = "warm_start.pt"  # the policy after the warm start, kept so that other seeds can start from it


def recipe_differences(report: dict[str, Any], recipe: Recipe, free: tuple[str, ...]) -> list[str]:
    """The recipe fields in which `report`'s recipe and `recipe` differ, ignoring the GRPO budget, how often it
    saves checkpoints and the `free` GRPO fields."""

    def comparable(data: dict[str, Any]) -> dict[str, Any]:
        ignored = ("max_steps", "resume_from", "save_every", *free)
        grpo = {k: v for k, v in data.get("grpo", {}).items() if k not in ignored}
        kept = {k: v for k, v in data.items() if k not in ("minutes", "grpo")}
        for part, field in (key.split(".", 1) for key in free if "." in key):  # "warm_start.in_grpo"
            if isinstance(kept.get(part), dict):
                kept[part] = {k: v for k, v in kept[part].items() if k != field}
        return {**kept, "grpo": grpo}

    then = report.get("recipe", {})
    # A field the report's recipe predates reads as its default, which is what that run did; one since removed
    # fails to validate and is compared as written, so it differs.
    with contextlib.suppress(ValidationError):
        then = Recipe.model_validate(then).model_dump()
    then, now = comparable(then), comparable(recipe.model_dump())
    return sorted(k for k in then.keys() | now.keys() if then.get(k) != now.get(k))


def _resumable(out: Path, recipe: Recipe) -> dict[str, Any]:
    """The report a killed run of `recipe` left in `out`, checked to be the same experiment: every field but the
    GRPO budget (`minutes`, `grpo.max_steps`) must match, or resuming would pair evaluations of two experiments."""
    path = out / "report.json"
    if not path.exists():
        raise ValueError(f"--resume: {path} does not exist (nothing to resume; run without --resume)")
    report = json.loads(path.read_text())
    differ = recipe_differences(report, recipe, ())
    if differ:
        raise ValueError(f"--resume: {path} was written by another recipe (differs in: {', '.join(differ)})")
    if "b" not in report.get("evaluations", {}):
        raise ValueError(f"--resume: {path} has no evaluation after the warm start; run again without --resume")
    report["recipe"] = recipe.model_dump()
    return report


# The GRPO fields a run may change and still take another run's warm start and evaluation (b) (--warm-start-from),
# and which tasks GRPO draws (balance_tasks_by, warm_start.in_grpo).
SHAREABLE = ("seed", "output_dir", "sampler_dtype", "reward", "tool_call_weight", "credit_requires_answer",
             "learning_rate", "beta", "negative_advantage_weight", "balance_tasks_by", "warm_start.in_grpo")


def _shared_warm_start(folder: Path, recipe: Recipe) -> dict[str, Any]:
    """What another seed's run in `folder` measured before GRPO (the warm start and evaluation (b)), checked to
    be the same experiment up to the GRPO seed, output folder, sampler dtype, training reward, learning rate, KL
    weight, negative-advantage weight and how GRPO draws its tasks: neither the warm start nor (b) depends on them (evaluations run in
    float32 whatever the rollouts sampled in and count successes by the env's verifiable reward whatever GRPO is trained on; the warm start has its own
    learning rate, and the KL reference is the warm-started policy)."""
    path, weights = folder / "report.json", folder / WARM_WEIGHTS
    if recipe.warm_start is None or recipe.warm_start.steps <= 0:
        raise ValueError("--warm-start-from: this recipe has no warm start to share")
    if not path.exists() or not weights.exists():
        raise ValueError(f"--warm-start-from: {folder} holds no report.json and {WARM_WEIGHTS} (a run of this "
                         "recipe writes both once its warm start is evaluated)")
    report = json.loads(path.read_text())
    differ = recipe_differences(report, recipe, SHAREABLE)
    if differ:
        raise ValueError(f"--warm-start-from: {path} was written by another recipe (differs in: "
                         f"{', '.join(differ)}); only {', '.join(k if '.' in k else 'grpo.' + k for k in SHAREABLE)} and the GRPO "
                         "budget may differ")
    if "b" not in report.get("evaluations", {}) or "warm_start" not in report:
        raise ValueError(f"--warm-start-from: {path} has no evaluation after the warm start")
    return report


def _metric_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run_recipe(recipe: Recipe, console: Console | None = None,
               trainer_factory: Callable[[GRPOConfig], Any] | None = None, resume: bool = False,
               warm_start_from: str | Path | None = None) -> dict[str, Any]:
    """Run `recipe` end to end (see the module docstring) and return its report (also written as report.json).

    With `resume`, a run that was killed (or stopped after GRPO, before its last evaluation) goes on from what it
    left in the output folder: the warm start and evaluation (b) are taken from its report.json, the weights from
    its newest checkpoint; GRPO goes on while its budget lasts (`minutes` counted over the steps already in
    metrics.jsonl, or `grpo.max_steps`), then evaluation (c) runs. The GRPO sampling stream after the checkpoint is
    not the one the killed run would have drawn (its random state is not saved).

    With `warm_start_from`, a folder where a run of the same recipe with another `grpo.seed` wrote its report and
    warm-started weights, the warm start and evaluation (b) are taken from there instead of being redone: they do
    not depend on the GRPO seed, so the run is the one it would have been (its GRPO episodes derive from the seed
    and step alone), less their time."""
    from envgym.train.policy import load_policy
    from envgym.train.sft import conversation_samples, supervised_fine_tune
    from envgym.train.trainer import GRPOTrainer, make_env
    from synth.subsets import fair_demonstrations

    console = console or Console(stderr=True)
    torch.set_num_threads(recipe.threads)
    out = Path(recipe.grpo.get("output_dir", f"runs/{recipe.name}"))
    out.mkdir(parents=True, exist_ok=True)
    previous = _resumable(out, recipe) if resume else None
    shared = _shared_warm_start(Path(warm_start_from), recipe) if warm_start_from and previous is None else None
    if previous is None:
        (out / "metrics.jsonl").unlink(missing_ok=True)  # the curve shows this run only
    started = time.perf_counter()
    kinds = tuple(recipe.env.kinds)
    ((env_id, suite, heldout, folder),) = _synth_suites(recipe.env.seed, 1, recipe.env.tasks, kinds, recipe.env.heldout,
                                          recipe.env.split_seed, out / "train")
    transfer: list[Suite] = []
    if recipe.transfer is not None:
        t = recipe.transfer
        transfer = _synth_suites(t.seed, t.domains, t.tasks, kinds, t.per_domain, recipe.env.split_seed,
                                 out / "transfer", exclude=(suite["source"],))
    warm = recipe.warm_start
    more: list[Suite] = []  # the warm start's further domains: trained on, never evaluated
    in_grpo = warm is not None and warm.steps > 0 and warm.domains > 0 and warm.in_grpo
    if warm is not None and warm.steps > 0 and warm.domains > 0 and (in_grpo or (shared is None and previous is None)):
        more = _synth_suites(warm.domains_seed, warm.domains, warm.domains_tasks, kinds, 0, recipe.env.split_seed,
                             out / "warm", exclude=(suite["source"], *(s.summary["source"] for s in transfer)))
    suites = {"train": suite, "transfer": [s.summary for s in transfer]}
    if more:
        suites["warm_start"] = [s.summary for s in more]
    (out / "suite.json").write_text(json.dumps(suites, indent=2) + "\n")
    train_ids = [i for i in _task_ids(folder) if i not in set(heldout)]  # the training domain's, in its order
    grpo_env = env_id
    if in_grpo:  # one env whose tasks are the further domains' and then the training domain's (held-out last)
        import gymnasium as gym

        grpo_env = f"envgym/{recipe.name}-mixture-v0"
        gym.register(grpo_env, entry_point="envgym.mixture:MixtureEnv",
                     kwargs={"env_ids": [env_id, *(s.env_id for s in more)]})
    try:
        # GRPO runs for `minutes`: max_steps only bounds it when the recipe sets it.
        config = GRPOConfig.from_dict({"max_steps": 1_000_000, "save_every": 0, **recipe.grpo, "env_id": grpo_env,
                                       "output_dir": str(out), "heldout_tasks": recipe.env.heldout},
                                      source=f"recipe {recipe.name}: grpo")
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    # The policy's initial weights (random ones, for 'tiny-random') follow the warm start's seed, not grpo.seed:
    # runs that differ in grpo.seed start GRPO from the same weights.
    init_seed = recipe.warm_start.seed if recipe.warm_start is not None else config.seed
    trainer = (trainer_factory or (lambda c: GRPOTrainer(c, policy=load_policy(c.model, init_seed),
                                                          console=console)))(config)
    transfer_envs = {s.env_id: [make_env(s.env_id) for _ in trainer.envs] for s in transfer}
    others = {spec.key(): eval_set_tasks(spec) for spec in recipe.evaluate}
    if len(others) != len(recipe.evaluate):
        raise ValueError(f"recipe {recipe.name}: two evaluate entries share the name; give each a label")
    report: dict[str, Any] = previous or {
        "recipe": recipe.model_dump(), "env_id": env_id, "suite": suite,
        "transfer": [{"env_id": s.env_id, "source": s.summary["source"], "tasks": s.heldout} for s in transfer],
        "evaluations": {}, "per_task": {}}
    # The tasks GRPO draws from, per domain (the training domain's held-out users never among them).
    report["grpo_tasks"] = {suite["source"]: len(train_ids),
                            **({s.summary["source"]: len(_task_ids(s.folder)) for s in more} if in_grpo else {})}

    def measure(label: str) -> None:
        clock = time.perf_counter()
        results = {"train_domain": evaluate_tasks(trainer, trainer.envs, trainer.heldout_tasks, recipe.eval_seed)}
        for s in transfer:
            results[s.env_id] = evaluate_tasks(trainer, transfer_envs[s.env_id], s.heldout, recipe.eval_seed)
        if transfer:
            results["never_trained_domains"] = [ok for s in transfer for ok in results[s.env_id]]
            results["all"] = results["train_domain"] + results["never_trained_domains"]
        for key, (envs, ids) in others.items():
            results[key] = evaluate_tasks(trainer, envs, ids, recipe.eval_seed)
        report["evaluations"][label] = {k: summarize(v) for k, v in results.items()}
        report["evaluations"][label]["seconds"] = round(time.perf_counter() - clock, 1)
        for key, values in results.items():
            report["per_task"].setdefault(key, {})[label] = values
        _write(out, report)
        line = ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in results.items())
        console.print(f"[bold]{label}[/]: {line}")

    if previous is not None:
        _resume_grpo(trainer, out, recipe, console)
    if shared is not None:
        trainer.model.load_state_dict(torch.load(Path(warm_start_from or "") / WARM_WEIGHTS, weights_only=True))
        report["warm_start"] = {**shared["warm_start"], "from": str(warm_start_from)}
        for label in ("a", "b"):
            if label in shared["evaluations"]:
                report["evaluations"][label] = shared["evaluations"][label]
                for key, values in shared["per_task"].items():
                    if label in values:
                        report["per_task"].setdefault(key, {})[label] = values[label]
        _write(out, report)
        console.print(f"warm start and evaluation (b) from {warm_start_from}")
    elif previous is None and recipe.evaluate_base:
        measure("a")
    if shared is None and previous is None and recipe.warm_start is not None and recipe.warm_start.steps > 0:
        w = recipe.warm_start
        clock = time.perf_counter()
        demos = fair_demonstrations(folder, train_ids)
        for domain in more:  # a seeded draw of each further domain's tasks, in its own order
            ids = _task_ids(domain.folder)
            if len(ids) < w.per_domain:
                raise ValueError(f"warm_start: {domain.summary['source']} has {len(ids)} tasks of kinds {kinds}, "
                                 f"{w.per_domain} asked for (raise warm_start.domains_tasks)")
            picked = sorted(random.Random(w.seed).sample(range(len(ids)), w.per_domain))
            demos += fair_demonstrations(domain.folder, [ids[i] for i in picked])
        eos = trainer.tokenizer.eos_token_id
        samples = [s for d in demos for s in conversation_samples(trainer.tokenizer, d["messages"], d["tools"], eos)]
        losses = supervised_fine_tune(trainer.model, samples, steps=w.steps, batch_size=w.batch,
                                      learning_rate=w.learning_rate, pad_token_id=trainer.sampler.pad_token_id,
                                      seed=w.seed, console=console)
        report["warm_start"] = {"demonstrations": len(demos), "samples": len(samples),
                                "domains": [suite["source"], *(d.summary["source"] for d in more)],
                                "losses": [round(x, 4) for x in losses],
                                "seconds": round(time.perf_counter() - clock, 1)}
    if shared is None and previous is None:
        measure("b")
        if recipe.warm_start is not None and recipe.warm_start.steps > 0:
            torch.save(trainer.model.state_dict(), out / WARM_WEIGHTS)
    spent = sum(r["step_s"] for r in _metric_rows(out / "metrics.jsonl"))  # 0 unless resumed
    if previous is None or (trainer.step < trainer.config.max_steps and spent < recipe.minutes * 60):
        trainer.train(max_seconds=recipe.minutes * 60 - spent)
    measure("c")
    rows = _metric_rows(out / "metrics.jsonl")  # every step of the run, before a resume included
    steps = [r["step_s"] for r in rows]
    report["grpo"] = {"steps": len(rows), "updates": sum(int(r["updated"]) for r in rows),
                      "step_s_median": sorted(steps)[len(steps) // 2] if steps else None,
                      "train_success": [round(r["success_rate"], 3) for r in rows]}
    report["paired"] = {key: paired(v["b"], v["c"], recipe.bootstrap) for key, v in report["per_task"].items()}
    report["wall_s"] = round(time.perf_counter() - started, 1)  # this invocation's (a resumed run's: since resuming)
    if previous is not None:
        report["resumed"] = report.get("resumed", 0) + 1
    _write(out, report)
    (out / "results.md").write_text(results_markdown(report))
    return report


def _resume_grpo(trainer: Any, out: Path, recipe: Recipe, console: Console) -> None:
    """Load the newest checkpoint of `out` into `trainer` (none: GRPO had not saved one; it starts from the warm
    start again, which the killed run's report does not hold, so that is refused)."""
    from envgym.train.checkpoints import CHECKPOINT_PREFIX

    if not any(out.glob(f"{CHECKPOINT_PREFIX}*")):
        raise ValueError(f"--resume: {out} has no {CHECKPOINT_PREFIX}* folder: the warm-started weights were not "
                         "saved before the run stopped; run again without --resume")
    path = trainer.load_checkpoint("latest")
    console.print(f"resumed from {path} (GRPO step {trainer.step}, policy version {trainer.version})")


def _write(out: Path, report: dict[str, Any]) -> None:
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")  # after each stage: survives a kill


def results_markdown(report: dict[str, Any]) -> str:
    """The held-out table of one run: each task set's success after the warm start and after GRPO, and the change."""
    names = {"train_domain": "train domain, held-out users", "never_trained_domains": "never-trained domains",
             "all": "all held-out tasks"}
    lines = [f"# {report['recipe']['name']}: held-out success (greedy)", "",
             "| tasks | n | (b) after warm start | (c) after GRPO | change | 95% bootstrap | gained / lost | sign p |",
             "|---|---|---|---|---|---|---|---|"]
    for key, pair in report["paired"].items():
        b, c = report["evaluations"]["b"][key], report["evaluations"]["c"][key]
        low, high = pair["bootstrap95_points"]
        lines.append(f"| {names.get(key, key)} | {pair['tasks']} | {_cell(b)} | {_cell(c)} | "
                     f"{pair['change_points']:+.1f} | [{low:+.1f}, {high:+.1f}] | {pair['gained']} / {pair['lost']} | "
                     f"{pair['sign_test_p']} |")
    g = report["grpo"]
    median = f"{g['step_s_median']:.1f}" if g["step_s_median"] is not None else "-"
    lines += ["", f"GRPO: {g['steps']} steps, {g['updates']} updates, median step {median} s; "
              f"wall time {report['wall_s']} s" + (" since resuming." if report.get("resumed") else "."), ""]
    return "\n".join(lines)


def _cell(result: dict[str, Any]) -> str:
    low, high = result["ci95"]
    return f"{result['successes']}/{result['tasks']} [{low:.2f}, {high:.2f}]"
