"""The optimizer's parts on their own: the Pareto front, playbook operations, merging, reply parsing, the split."""

from __future__ import annotations

import json

import pytest

from envgym.optimize import (
    Candidate,
    EditError,
    PlaybookItem,
    PlaybookOp,
    ReflectionRejected,
    merge_candidates,
    pareto_front,
    parse_reflection,
    split_tasks,
)
from envgym.optimize.candidates import apply_ops, count_votes
from envgym.optimize.report import wilson

TASKS = ["t1", "t2", "t3"]


def test_a_candidate_best_on_a_single_task_stays_on_the_front() -> None:
    scores = {"a": {"t1": 1.0, "t2": 0.0, "t3": 0.5},
              "b": {"t1": 0.0, "t2": 1.0, "t3": 0.5},
              "c": {"t1": 0.5, "t2": 0.5, "t3": 0.5}}  # best on none: a and b each beat it somewhere, t3 ties
    assert pareto_front(scores, TASKS) == ["a", "b"]


def test_a_dominated_candidate_leaves_the_front_even_where_it_ties() -> None:
    scores = {"seed": {"t1": 0.0, "t2": 1.0, "t3": 0.0}, "child": {"t1": 1.0, "t2": 1.0, "t3": 0.0}}
    assert pareto_front(scores, TASKS) == ["child"]


def test_identical_candidates_collapse_to_the_first() -> None:
    same = {"t1": 1.0, "t2": 0.0, "t3": 0.0}
    assert pareto_front({"x": dict(same), "y": dict(same)}, TASKS) == ["x"]


def test_playbook_operations_change_one_item_at_a_time() -> None:
    items = (PlaybookItem("p1", "Use the calculator."), PlaybookItem("p2", "Round the answer."))
    ops = [PlaybookOp("refine", "p1", "Use the calculate tool for every product."), PlaybookOp("remove", "p2"),
           PlaybookOp("add", text="Reply with the exact number.")]
    out = apply_ops(items, ops, ["p3"])
    assert out == (PlaybookItem("p1", "Use the calculate tool for every product."),
                   PlaybookItem("p3", "Reply with the exact number."))


@pytest.mark.parametrize(("op", "message"), [
    (PlaybookOp("remove", "p9"), "no playbook item 'p9'"),
    (PlaybookOp("refine", "p1", "  "), "the item text is empty"),
    (PlaybookOp("add", text="x" * 401), "more than 400"),
])
def test_an_operation_that_does_not_fit_names_itself_and_changes_nothing(op: PlaybookOp, message: str) -> None:
    items = (PlaybookItem("p1", "Use the calculator."),)
    with pytest.raises(EditError, match=message):
        apply_ops(items, [PlaybookOp("add", text="fine"), op], ["p2"])


def test_votes_raise_the_counters_of_the_named_items_only() -> None:
    items = (PlaybookItem("p1", "a"), PlaybookItem("p2", "b", helpful=1))
    out = count_votes(items, helpful=["p2", "p2", "gone"], harmful=["p1"])
    assert [(i.helpful, i.harmful) for i in out] == [(0, 1), (3, 0)]


def test_merge_keeps_the_lines_and_items_of_both_parents() -> None:
    a = Candidate("c1", "Be careful.\nUse the tool for odd numbers.", (PlaybookItem("p1", "a", 2, 0),))
    b = Candidate("c2", "Be careful.\nUse the tool for even numbers.",
                  (PlaybookItem("p1", "a", 0, 3), PlaybookItem("p2", "b")))
    merged = merge_candidates(a, b, "c3")
    assert merged.prompt == "Be careful.\nUse the tool for odd numbers.\nUse the tool for even numbers."
    assert merged.playbook == (PlaybookItem("p1", "a", 2, 3), PlaybookItem("p2", "b"))
    assert (merged.parents, merged.origin) == (("c1", "c2"), "merge")


def test_playbook_items_show_in_the_system_text_with_their_ids_and_counters() -> None:
    text = Candidate("c1", "Base.", (PlaybookItem("p4", "Call calculate.", 1, 2),)).system_text()
    assert text == "Base.\n\n# Playbook\n- [p4] Call calculate. (helpful 1, harmful 2)"


def test_a_prompt_reply_parses_bare_or_fenced() -> None:
    body = json.dumps({"critique": "It guessed.", "prompt": "Always call calculate."})
    for reply in (body, f"Here you go:\n```json\n{body}\n```\nDone."):
        r = parse_reflection(reply, playbook=False)
        assert (r.critique, r.prompt) == ("It guessed.", "Always call calculate.")


@pytest.mark.parametrize(("reply", "playbook", "message"), [
    ("I would tell it to use the tool.", False, "holds no JSON object"),
    ('{"critique": "x", "prompt": "y"', False, "does not parse"),
    ('{"critique": "x"}', False, "no non-empty 'prompt'"),
    ('{"critique": "x", "operations": []}', True, "no non-empty 'operations'"),
    ('{"operations": [{"op": "rewrite", "text": "all"}]}', True, "'op' must be one of"),
    ('{"operations": [{"op": "remove"}]}', True, "needs an item 'id'"),
    ('{"operations": [{"op": "add", "text": "a"}], "helpful": "p1"}', True, "must be a list of item ids"),
])
def test_a_malformed_reply_is_rejected_with_its_reason(reply: str, playbook: bool, message: str) -> None:
    with pytest.raises(ReflectionRejected, match=message):
        parse_reflection(reply, playbook=playbook)


def test_train_and_heldout_tasks_are_disjoint_and_seeded() -> None:
    ids = [f"t{i}" for i in range(20)]
    train, heldout = split_tasks(ids, 6, 5, seed=3)
    assert (len(train), len(heldout)) == (6, 5) and not set(train) & set(heldout)
    assert split_tasks(ids, 6, 5, seed=3) == (train, heldout)
    assert split_tasks(ids, 6, 5, seed=4) != (train, heldout)
    with pytest.raises(ValueError, match="has only 20 tasks"):
        split_tasks(ids, 15, 6, seed=0)


def test_wilson_interval_stays_inside_zero_and_one() -> None:
    assert wilson(0, 4)[0] == 0.0 and wilson(4, 4)[1] == 1.0
    low, high = wilson(2, 4)
    assert low == pytest.approx(0.15, abs=0.01) and high == pytest.approx(0.85, abs=0.01)
