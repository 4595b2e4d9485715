"""Recipes (`envgym train RECIPE.yaml`): the statistics pinned to hand-computed values, the file format, and one
whole tiny run twice, showing that runs differing in `grpo.seed` share the split, warm start and its evaluation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from envgym.cli import main
from envgym.train.recipe import Recipe, is_recipe, paired, pool_reports, sign_test, wilson


def test_sign_test_matches_the_binomial_tail() -> None:
    assert sign_test(6, 0) == pytest.approx(2 / 64, abs=1e-4)  # run 13: 6 gained, 0 lost, p = 0.031
    assert sign_test(0, 0) == 1.0
    assert sign_test(3, 3) == 1.0
    assert sign_test(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024, abs=1e-4)
    assert sign_test(18, 0) == pytest.approx(2 / 2**18, rel=1e-3)  # 7.6e-6, not rounded to 0


def test_paired_counts_gains_losses_and_bootstraps_the_change() -> None:
    before = [True, False, False, False, True, False]
    after = [True, True, True, False, False, False]
    result = paired(before, after, resamples=500)
    assert (result["gained"], result["lost"], result["tasks"]) == (2, 1, 6)
    assert result["change_points"] == pytest.approx(100 / 6, abs=0.1)
    low, high = result["bootstrap95_points"]
    assert low < result["change_points"] < high
    assert paired([False] * 4, [True] * 4, resamples=200)["bootstrap95_points"] == [100.0, 100.0]


def test_wilson_of_run_13() -> None:
    assert wilson(5, 24) == (0.092, 0.405) and wilson(11, 24) == (0.279, 0.649)


def test_pool_reports_pairs_every_run_and_task() -> None:
    def run(b: list[bool], c: list[bool]) -> dict[str, Any]:
        return {"per_task": {"all": {"b": b, "c": c}}, "paired": {"all": paired(b, c, 100)}}

    pooled = pool_reports([run([False, False], [True, False]), run([False, True], [True, True])], resamples=100)
    assert pooled["runs"] == 2
    assert pooled["all"]["changes_points"] == [50.0, 50.0] and pooled["all"]["sd_points"] == 0.0
    assert (pooled["all"]["pooled"]["gained"], pooled["all"]["pooled"]["tasks"]) == (2, 4)


def test_pooled_seeds_that_agree_task_for_task_are_not_more_evidence_than_one() -> None:
    before = [False] * 24
    after = [i < 6 for i in range(24)]  # 6 gained...
    before[6:10] = after[6:10] = [True] * 4
    after[6:10] = [False] * 4  # ...and 4 lost, as the four gated seeds did
    one = paired(before, after, 2000)
    run = {"per_task": {"all": {"b": before, "c": after}}, "paired": {"all": one}}
    pooled = pool_reports([run] * 4, resamples=2000)["all"]["pooled"]
    independent = paired(before * 4, after * 4, 2000)
    assert pooled["change_points"] == one["change_points"] == 8.3
    width = lambda p: p["bootstrap95_points"][1] - p["bootstrap95_points"][0]  # noqa: E731
    # Drawing tasks whole, four copies of a run are as uncertain as the run; drawing pairs, twice as certain.
    assert abs(width(pooled) - width(one)) <= 4.2 and width(independent) < 0.6 * width(one)
    # Clusters of one pair each are the unclustered bootstrap.
    alone = paired(before, after, 500, clusters=range(24))
    assert {k: alone.pop(k) for k in ("clusters", "clusters_better", "clusters_worse")} == {
        "clusters": 24, "clusters_better": 6, "clusters_worse": 4}
    assert alone == paired(before, after, 500)
    with pytest.raises(AssertionError):
        paired(before, after, 10, clusters=[0, 1])


def test_a_recipe_reads_overrides_and_names_its_mistakes(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"name": "r", "grpo": {"seed": 0}}))
    assert is_recipe(path)
    recipe = Recipe.from_yaml(path, {"grpo.seed": 3, "minutes": 5, "env.heldout": 12})
    assert (recipe.grpo["seed"], recipe.minutes, recipe.env.heldout) == (3, 5, 12)
    with pytest.raises(ValueError, match=r"r\.yaml.*warm_strat"):
        Recipe.from_yaml(path, {"warm_strat.steps": 1})
    with pytest.raises(ValueError, match=r"r\.yaml.*in_grpo.*domains is 0"):
        Recipe.from_yaml(path, {"warm_start.in_grpo": True})
    flat = tmp_path / "flat.yaml"
    flat.write_text("max_steps: 1\n")
    assert not is_recipe(flat)


def test_a_recipe_extends_another_section_by_section(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("name: base\nminutes: 5\nwarm_start: {steps: 8, batch: 8}\n"
                                        "grpo: {seed: 0, learning_rate: 2.0e-5}\n")
    (tmp_path / "sub").mkdir()
    child = tmp_path / "sub" / "child.yaml"
    child.write_text("extends: ../base.yaml\nwarm_start: {steps: 16}\ngrpo: {seed: 3}\n")
    assert is_recipe(child)
    recipe = Recipe.from_yaml(child, {"grpo.beta": 0.1})
    assert (recipe.name, recipe.minutes) == ("base", 5)
    assert (recipe.warm_start.steps, recipe.warm_start.batch) == (16, 8)  # type: ignore[union-attr]
    assert recipe.grpo == {"seed": 3, "learning_rate": 2.0e-5, "beta": 0.1}
    (tmp_path / "base.yaml").write_text("extends: sub/child.yaml\n")
    with pytest.raises(ValueError, match="comes back to itself"):
        Recipe.from_yaml(child)
    child.write_text("extends: [../base.yaml]\n")
    with pytest.raises(ValueError, match="names one recipe file"):
        Recipe.from_yaml(child)


def test_the_balanced_recipe_is_the_base_recipe_with_its_four_fields() -> None:
    from envgym.train.recipe import recipe_differences

    examples = Path(__file__).resolve().parents[2] / "examples"
    balanced = Recipe.from_yaml(examples / "multiturn_grpo_balanced.yaml")
    base = Recipe.from_yaml(examples / "multiturn_grpo.yaml")
    assert recipe_differences({"recipe": base.model_dump()}, balanced, ("output_dir",)) == sorted(
        ["warm_start", "grpo"])
    by_hand = Recipe.from_yaml(examples / "multiturn_grpo.yaml", {
        "warm_start.steps": 16, "warm_start.domains": 6, "grpo.negative_advantage_weight": 0.1,
        "grpo.balance_tasks_by": "kind"})
    assert recipe_differences({"recipe": by_hand.model_dump()}, balanced, ("output_dir",)) == []


@pytest.mark.parametrize("name", ["multiturn_grpo.yaml", "multiturn_grpo_balanced.yaml", "transfer_bfcl.yaml"])
def test_the_example_recipes_are_valid_and_name_real_fields_and_tasks(name: str) -> None:
    from envgym.train.config import GRPOConfig
    from envgym.train.recipe import eval_set_tasks

    recipe = Recipe.from_yaml(Path(__file__).resolve().parents[2] / "examples" / name)
    GRPOConfig.from_dict(recipe.grpo)
    assert recipe.env.heldout + recipe.transfer.domains * recipe.transfer.per_domain >= 120  # type: ignore[union-attr]
    for spec in recipe.evaluate:
        envs, ids = eval_set_tasks(spec)
        assert len(ids) == spec.tasks and len(set(ids)) == len(ids)
        for env in envs:
            env.close()


# A recipe small enough for a test: one domain of 150 tasks (4 held out), one never-trained domain (3 tasks), one
# SFT step, one GRPO step of a randomly initialised tiny model.
TINY: dict[str, Any] = {
    "name": "tiny", "env": {"seed": 1, "tasks": 150, "heldout": 4},
    "transfer": {"seed": 101, "domains": 1, "tasks": 150, "per_domain": 3},
    "warm_start": {"steps": 1, "batch": 2}, "minutes": 0, "bootstrap": 100,
    "grpo": {"model": "tiny-random", "group_size": 2, "tasks_per_step": 1, "max_steps": 1, "max_turns": 2,
             "max_new_tokens": 8}}


@pytest.mark.slow
def test_envgym_train_runs_a_recipe_and_seeds_change_only_the_grpo_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = {**TINY, "evaluate": [{"env": "envgym/retail-v0", "tasks": 2},
                                   {"env": "envgym/bfcl-v0", "kwargs": {"category": "simple_python"}, "tasks": 2,
                                    "label": "bfcl simple_python"}],
              "grpo": {"model": "tiny-random", "group_size": 2, "tasks_per_step": 1, "max_steps": 1,
                       "max_turns": 2, "max_new_tokens": 8, "temperature": 1.0}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(recipe))
    reports = []
    for seed in (0, 1):
        out = tmp_path / f"seed{seed}"
        assert main(["train", str(path), "--json", "--set", f"grpo.seed={seed}",
                     "--set", f"grpo.output_dir={out}"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert set(summary["paired"]) == {"train_domain", "never_trained_domains", "all", "envgym/retail-v0",
                                          "bfcl simple_python",
                                          *[t["env_id"] for t in json.loads((out / "report.json").read_text())
                                            ["transfer"]]}
        assert summary["paired"]["all"]["tasks"] == 4 + 3
        assert summary["paired"]["bfcl simple_python"]["tasks"] == 2
        report = json.loads((out / "report.json").read_text())
        assert report["suite"]["source"] not in {t["source"] for t in report["transfer"]}
        assert (out / "results.md").read_text().count("\n|") >= 5 and (out / "reward_curve.png").exists()
        reports.append(report)
    first, second = reports
    # Same split, same initial weights and warm start, same evaluation of it; another GRPO stream.
    assert first["suite"] == second["suite"] and first["transfer"] == second["transfer"]
    assert first["warm_start"]["losses"] == second["warm_start"]["losses"]
    assert first["per_task"]["all"]["b"] == second["per_task"]["all"]["b"]
    assert (first["recipe"]["grpo"]["seed"], second["recipe"]["grpo"]["seed"]) == (0, 1)

    # Seed 1 again, taking the warm start and (b) from seed 0's folder: the same run, less the warm start's time.
    shared_out = tmp_path / "seed1-shared"
    assert main(["train", str(path), "--json", "--set", "grpo.seed=1", "--set", f"grpo.output_dir={shared_out}",
                 "--warm-start-from", str(tmp_path / "seed0")]) == 0
    capsys.readouterr()
    shared = json.loads((shared_out / "report.json").read_text())
    assert shared["warm_start"] == {**first["warm_start"], "from": str(tmp_path / "seed0")}
    assert shared["per_task"] == second["per_task"] and shared["paired"] == second["paired"]

    def episodes(out: Path) -> list[dict[str, Any]]:
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in row.items() if not k.endswith("_s") and "per_s" not in k} for row in rows]

    assert episodes(shared_out) == episodes(tmp_path / "seed1")
    # The rollouts' sampler dtype, the training reward, GRPO's step size, KL and negative weights and how it draws
    # its tasks may differ too:
    # evaluations run in float32 whatever the sampler and count successes by the env's verifiable reward whatever
    # GRPO trains on, and the warm start has its own learning rate, so (b) is the same.
    low_out = tmp_path / "seed1-bf16"
    assert main(["train", str(path), "--json", "--set", "grpo.seed=1", "--set", f"grpo.output_dir={low_out}",
                 "--set", "grpo.sampler_dtype=bfloat16", "--set", "grpo.reward=env+tools",
                 "--set", "grpo.credit_requires_answer=true", "--set", "grpo.learning_rate=0.00001",
                 "--set", "grpo.beta=0.0", "--set", "grpo.negative_advantage_weight=0.1",
                 "--set", "grpo.balance_tasks_by=kind", "--warm-start-from", str(tmp_path / "seed0")]) == 0
    capsys.readouterr()
    low = json.loads((low_out / "report.json").read_text())
    assert low["recipe"]["grpo"]["sampler_dtype"] == "bfloat16" and low["recipe"]["grpo"]["credit_requires_answer"]
    assert low["per_task"]["all"]["b"] == first["per_task"]["all"]["b"] and "c" in low["evaluations"]
    # Only the GRPO seed and folder may differ from the run shared from: another split is refused, by name.
    assert main(["train", str(path), "--set", "grpo.seed=2", "--set", "env.heldout=3",
                 "--set", f"grpo.output_dir={tmp_path / 'seed2'}", "--warm-start-from", str(tmp_path / "seed0")]) == 2
    assert "differs in: env" in capsys.readouterr().err


@pytest.mark.slow
def test_a_warm_start_on_more_domains_never_trains_on_an_evaluated_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The further domains are drawn with the never-trained domains' own synthesis seed, so the draw holds the
    # evaluated domain again: it must be left out, and two others taken.
    recipe = {**TINY, "warm_start": {"steps": 1, "batch": 2, "domains": 2, "domains_seed": 101, "domains_tasks": 150,
                                     "per_domain": 2}}
    path = tmp_path / "broad.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "run"
    assert main(["train", str(path), "--json", "--set", f"grpo.output_dir={out}"]) == 0
    capsys.readouterr()
    report = json.loads((out / "report.json").read_text())
    suites = json.loads((out / "suite.json").read_text())
    trained = report["warm_start"]["domains"]
    evaluated = {report["suite"]["source"], *(t["source"] for t in report["transfer"])}
    drawn = sorted(p.name for p in (out / "warm" / "synth").iterdir() if (p / "world.yaml").exists())
    assert report["transfer"][0]["source"] in drawn  # the draw did hold the evaluated domain
    assert trained[0] == report["suite"]["source"] and len(set(trained[1:])) == 2
    assert not set(trained[1:]) & evaluated
    assert [s["source"] for s in suites["warm_start"]] == trained[1:]
    assert report["warm_start"]["demonstrations"] == report["suite"]["train_tasks"] + 2 * 2
    # Their tools differ from every evaluated domain's: what they teach is the conversation, not a name to copy.
    tools = {t for s in suites["warm_start"] for t in s["tools"]}
    assert not tools & {t for s in [suites["train"], *suites["transfer"]] for t in s["tools"]}

    # GRPO on those domains too (warm_start.in_grpo), from this run's warm start: the same (b), GRPO's tasks drawn
    # from every trained domain, the held-out users still never drawn, and only the training domain evaluated.
    mixed = tmp_path / "mixed"
    assert main(["train", str(path), "--json", "--set", f"grpo.output_dir={mixed}", "--set", "warm_start.in_grpo=true",
                 "--set", "grpo.max_steps=4", "--set", "minutes=5", "--warm-start-from", str(out)]) == 0
    capsys.readouterr()
    both = json.loads((mixed / "report.json").read_text())
    assert both["per_task"]["all"]["b"] == report["per_task"]["all"]["b"] and "c" in both["evaluations"]
    assert list(both["grpo_tasks"]) == trained and both["grpo_tasks"][trained[0]] == report["suite"]["train_tasks"]
    assert report["grpo_tasks"] == {trained[0]: report["suite"]["train_tasks"]}
    drawn = [json.loads(line) for line in (mixed / "rollouts.jsonl").read_text().splitlines()]
    folders = {p.name: p for part in ("train", "warm") for p in (mixed / part / "suite").iterdir() if p.is_dir()}
    assert {row["env_name"] for row in drawn} <= set(folders) and len({row["env_name"] for row in drawn}) > 1
    (train_folder,) = [p for p in folders.values() if p.parent.parent.name == "train"]
    held = [json.loads(line)["id"] for line in (train_folder / "tasks.jsonl").read_text().splitlines()][-4:]
    assert not {row["task_id"] for row in drawn} & set(held)


@pytest.mark.slow
def test_a_killed_recipe_resumes_from_its_report_and_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run killed after GRPO's checkpoint, before evaluation (c), goes on with `--resume`: (b) and the warm start
    are kept, GRPO continues from the checkpoint up to its budget with no step twice, and (c) is measured."""
    recipe = {"name": "tiny", "env": {"seed": 1, "tasks": 150, "heldout": 4}, "warm_start": {"steps": 1, "batch": 2},
              "minutes": 10, "bootstrap": 100,
              "grpo": {"model": "tiny-random", "group_size": 2, "tasks_per_step": 1, "max_steps": 1,
                       "max_turns": 2, "max_new_tokens": 8, "temperature": 1.0}}
    path, out = tmp_path / "tiny.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump(recipe))
    # Nothing to resume yet: a one-line error, not a fresh run.
    assert main(["train", str(path), "--resume", "--set", f"grpo.output_dir={out}"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert main(["train", str(path), "--set", f"grpo.output_dir={out}"]) == 0
    first = json.loads((out / "report.json").read_text())
    killed = {**first, "evaluations": {"b": first["evaluations"]["b"]},
              "per_task": {k: {"b": v["b"]} for k, v in first["per_task"].items()}}
    for key in ("paired", "grpo", "wall_s"):
        killed.pop(key)
    (out / "report.json").write_text(json.dumps(killed))  # what a kill during evaluation (c) leaves

    assert main(["train", str(path), "--resume", "--set", f"grpo.output_dir={out}", "--set", "grpo.max_steps=2"]) == 0
    resumed = json.loads((out / "report.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]  # step 0 from the first run, step 1 after the checkpoint
    assert resumed["grpo"]["steps"] == 2 and resumed["recipe"]["grpo"]["max_steps"] == 2
    assert resumed["warm_start"] == first["warm_start"]
    assert resumed["per_task"]["train_domain"]["b"] == first["per_task"]["train_domain"]["b"]
    assert set(resumed["evaluations"]) == {"b", "c"} and (out / "checkpoint-000002").exists()

    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**recipe, "env": {**recipe["env"], "heldout": 3}}))
    capsys.readouterr()
    # Another experiment's report is not paired with this one.
    assert main(["train", str(other), "--resume", "--set", f"grpo.output_dir={out}"]) == 2
    assert "differs in: env" in capsys.readouterr().err
