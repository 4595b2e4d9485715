"""The transfer benchmark end to end at tiny sizes (a random tiny model, two domains, one task per eval set): every
arm trains on the same number of target tokens (to within one batch), on data with nothing of BFCL's, and the report
pairs each arm with the base model on the same tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import envgym.train.sft as sft_module
from benchmarks.transfer import (
    ARMS,
    OLDER_DATA,
    EvalSpec,
    Evaluator,
    TransferConfig,
    read_demos,
    run_transfer,
    select_to_budget,
    write_demos,
)
from benchmarks.transfer_leak import bfcl_vocabulary, find_leaks


def test_select_to_budget_reaches_the_budget_in_whole_batches_and_says_when_it_cannot() -> None:
    pool = [{"id": i} for i in range(10)]

    def count(demo: dict[str, int]) -> tuple[list[str], int]:
        return [f"s{demo['id']}"], 10

    demos, samples = select_to_budget(pool, count, budget=35, batch=3, seed=0)
    assert len(demos) == len(samples) == 6  # 4 reach 40 >= 35 tokens; two more fill the second batch of 3
    assert select_to_budget(pool, count, 35, 3, seed=0) == (demos, samples)
    assert select_to_budget(pool, count, 35, 3, seed=1) != (demos, samples)
    with pytest.raises(ValueError, match="under the budget of 200"):
        select_to_budget(pool, count, 200, 3, seed=0)


def test_select_to_budget_skips_what_count_gives_no_samples() -> None:
    """The driver's memory cap: a conversation too long to train on is counted as no samples and never taken."""
    pool = [{"id": i} for i in range(10)]

    def count(demo: dict[str, int]) -> tuple[list[str], int]:
        return ([], 0) if demo["id"] % 2 else ([f"s{demo['id']}"], 10)

    demos, samples = select_to_budget(pool, count, budget=20, batch=2, seed=0)
    assert len(demos) == len(samples) == 2 and all(d["id"] % 2 == 0 for d in demos)


@pytest.mark.slow
def test_the_driver_trains_each_arm_on_equal_clean_tokens_and_pairs_it_with_the_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two domains of the committed older data, one of them with BFCL's `cancel_order` as a tool: it must be dropped.
    older = [d for d in read_demos(OLDER_DATA) if d["domain"] in {"air_quality_stations", "equity_orders"}]
    write_demos(tmp_path / "older.jsonl.gz", older)
    config = TransferConfig(
        model="tiny-random", older_data=str(tmp_path / "older.jsonl.gz"), domains=2, tasks_per_domain=3,
        token_budget=150, sft_batch=1, max_new_tokens=4,
        max_turns=1, max_sequence_tokens=8192, bootstrap=50, output_dir=str(tmp_path),
        eval_sets=[EvalSpec(label="retail", env="envgym/retail-v0", tasks=1),
                   EvalSpec(label="travel", env="envgym/travel-v0", tasks=1),
                   EvalSpec(label="bfcl simple_python", env="envgym/bfcl-v0", kwargs={"category": "simple_python"},
                            tasks=1)])
    report = run_transfer(config)
    vocabulary = bfcl_vocabulary()
    tokens = {arm: report["arms"][arm]["target_tokens"] for arm in ARMS}
    assert all(t >= 150 for t in tokens.values()) and max(tokens.values()) - min(tokens.values()) < 1500
    for arm in ARMS:
        assert report["arms"][arm]["steps"] >= 1
        assert len(report["arms"][arm]["losses"]) == report["arms"][arm]["steps"]
        trained = read_demos(tmp_path / "arms" / f"{arm}.jsonl.gz")
        assert trained and find_leaks(trained, vocabulary) == []
    assert report["arms"]["older"]["dropped_domains"] == ["equity_orders"]
    assert report["arms"]["single"]["domains"] == 1 and report["arms"]["broad"]["pool_domains"] == 2
    assert set(report["per_task"]) == {"retail", "travel", "bfcl simple_python", "retail+travel"}
    assert set(report["paired"]["retail+travel"]) == {"broad - base", "single - base", "older - base",
                                                      "broad - single", "broad - older"}
    assert report["paired"]["retail+travel"]["broad - base"]["tasks"] == 2
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["eval_tasks"] == report["eval_tasks"] and (tmp_path / "results.md").read_text().count("\n|") > 8

    # Killed during the last arm: --resume trains and plays only that arm, and keeps the rest as it was.
    killed = {**saved, "evaluations": {k: v for k, v in saved["evaluations"].items() if k != "older"},
              "per_task": {k: {m: r for m, r in v.items() if m != "older"} for k, v in saved["per_task"].items()}}
    killed["arms"]["older"].pop("losses")
    (tmp_path / "report.json").write_text(json.dumps(killed))
    played: list[int] = []
    run = Evaluator.run
    monkeypatch.setattr(Evaluator, "run", lambda self, *a, **k: played.append(1) or run(self, *a, **k))
    resumed = run_transfer(config, resume=True)
    assert len(played) == 1 and resumed["resumed"] == 1
    assert resumed["per_task"] == report["per_task"]  # the same seeds and weights: the same greedy results
    assert resumed["arms"]["broad"]["losses"] == report["arms"]["broad"]["losses"]
    assert resumed["arms"]["older"]["losses"] == report["arms"]["older"]["losses"]
    with pytest.raises(ValueError, match="differs in: token_budget"):
        run_transfer(config.model_copy(update={"token_budget": 151}), resume=True)

    # A set added later (with its own limits) is played by every model, from the arms' kept weights: nothing is
    # trained again, and what was measured before stays as it was.
    assert all((tmp_path / "arms" / f"{arm}.pt").exists() for arm in ARMS)
    trained: list[int] = []
    real_sft = sft_module.supervised_fine_tune
    monkeypatch.setattr(sft_module, "supervised_fine_tune", lambda *a, **k: trained.append(1) or real_sft(*a, **k))
    played.clear()
    extra = EvalSpec(label="bfcl multi_turn_base", env="envgym/bfcl-multi-turn-v0",
                     kwargs={"category": "multi_turn_base"}, tasks=1, max_turns=2, max_sequence_tokens=8192)
    grown = config.model_copy(update={"eval_sets": [*config.eval_sets, extra]})
    extended = run_transfer(grown, resume=True)
    assert trained == [] and len(played) == 1 + len(ARMS)
    assert {k: v for k, v in extended["per_task"].items() if k != "bfcl multi_turn_base"} == report["per_task"]
    assert set(extended["per_task"]["bfcl multi_turn_base"]) == {"base", *ARMS}
    assert extended["eval_tasks"]["bfcl multi_turn_base"] and len(extended["parts"]) == 3
    assert "bfcl multi_turn_base" in extended["paired"]
    assert "| bfcl multi_turn_base |" in (tmp_path / "results.md").read_text()
    with pytest.raises(ValueError, match="eval_sets"):  # an earlier set changed is another run, not an extension
        changed = [config.eval_sets[0].model_copy(update={"tasks": 2}), *config.eval_sets[1:]]
        run_transfer(config.model_copy(update={"eval_sets": changed}), resume=True)
