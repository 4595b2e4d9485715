"""The transfer benchmark's leak check (issue 39 part 4): it finds BFCL's tool names, backend names and question text
in a conversation, and no arm trains on any of them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from benchmarks.transfer import OLDER_DATA, read_demos
from benchmarks.transfer_leak import BfclVocabulary, bfcl_vocabulary, find_leaks
from envgym.integrations.bfcl import data


@pytest.fixture(scope="module")
def vocabulary() -> BfclVocabulary:
    return bfcl_vocabulary()


@pytest.fixture(scope="module")
def older() -> list[dict[str, Any]]:
    return read_demos(OLDER_DATA)


def test_the_vocabulary_holds_bfcl_functions_backends_and_questions(vocabulary: BfclVocabulary) -> None:
    assert {"calculate_triangle_area", "mkdir", "post_tweet", "book_flight"} <= vocabulary.function_names
    assert {"GorillaFileSystem", "TradingBot", "VehicleControlAPI"} <= vocabulary.class_names <= vocabulary.distinctive
    assert "mkdir" not in vocabulary.distinctive  # one-word names count only as tool names, not in prose
    assert vocabulary.questions > 4000


def test_a_clean_conversation_passes_and_each_planted_leak_is_found(
    vocabulary: BfclVocabulary, older: list[dict[str, Any]]
) -> None:
    clean = next(d for d in older if d["domain"] == "air_quality_stations")
    assert find_leaks([clean], vocabulary) == []

    tool = copy.deepcopy(clean)
    tool["tools"][0]["function"]["name"] = "mkdir"
    assert any("tool named 'mkdir'" in leak for leak in find_leaks([tool], vocabulary))

    backend = copy.deepcopy(clean)
    backend["messages"][0]["content"] += " Tools run on the TravelAPI."
    assert any("'TravelAPI'" in leak for leak in find_leaks([backend], vocabulary))

    question = data.entry("multi_turn_base_7")["question"][0][0]["content"]
    asked = copy.deepcopy(clean)
    asked["messages"][1]["content"] = "Hello. " + question.upper()  # case and surrounding text do not hide it
    assert any("question text" in leak for leak in find_leaks([asked], vocabulary))


def test_the_older_data_leaks_only_in_the_domains_the_driver_drops(
    vocabulary: BfclVocabulary, older: list[dict[str, Any]]
) -> None:
    leaked = {d["domain"] for d in older if find_leaks([d], vocabulary)}
    # BFCL's TradingBot.cancel_order and TicketAPI.close_ticket are tools of two older domains: run_transfer drops
    # every conversation with a leak before it counts tokens, and checks the selection again.
    assert leaked == {"equity_orders", "helpdesk_tickets"}
    assert find_leaks([d for d in older if d["domain"] not in leaked], vocabulary) == []
