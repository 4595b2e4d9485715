"""Quality filters for model rewordings (issue 15, part 5): several lines, the agent's voice, a dropped literal, a
leaked answer or tool name each reject the reply, and the procedural opening stays."""

from __future__ import annotations

import pytest

from envgym.llm import ScriptedChatModel
from envgym.world.spec import Answer, TaskSpec, ToolCall
from synth.quality import paraphrase_problem, tool_summary_problem
from synth.stages.tasks import paraphrased

TASK = TaskSpec(id="t", instruction="You want the status of order O-1001.",
                opening="Hi, what is the status of my order O-1001?",
                solution=[ToolCall(name="get_order", arguments={"order_id": "O-1001"})],
                answers=[Answer(value="shipped", type="enum", choices=["pending", "shipped"])],
                meta={"literals": ["O-1001"]})


@pytest.mark.parametrize(("reply", "problem"), [
    ("", "empty"),
    ("Hello, could you check order O-1001?\nThanks!", "several lines"),
    ("Sure! How can I help you with order O-1001 today?", "speaks as the agent"),
    ("Could you look up where my order is at?", "drops 'O-1001'"),
    ("Has my order O-1001 shipped yet?", "leaks the answer 'shipped'"),
    ("Please run get_order for O-1001.", "names the tool 'get_order'"),
    ('<tool_call>{"name": "get_order"}</tool_call> O-1001', "markup or a tool call"),
])
def test_a_reply_that_breaks_the_format_is_rejected(reply: str, problem: str) -> None:
    assert paraphrase_problem(reply, TASK) == problem


def test_a_faithful_rewording_is_used_and_a_bad_one_is_not() -> None:
    good = "Hello there, can you tell me where order O-1001 stands?"
    assert paraphrase_problem(good, TASK) is None
    used = paraphrased(ScriptedChatModel([good]), TASK)
    assert used.opening == good and used.meta["paraphrased"] is True
    kept = paraphrased(ScriptedChatModel(["Of course! Order O-1001 is on its way."]), TASK)
    assert kept == TASK


@pytest.mark.parametrize(("reply", "problem"), [
    ("Looks up one print job by its id.", None),
    ("Looks up one print job.\nThen stops.", "several lines"),
    ("I look up your print job.", "speaks as someone"),
    ("Sure, here's a print job lookup.", "speaks as someone"),
    ("Looks up one printer by its id.", "does not say it is about print job records"),
    ("Like cancel_print_job, looks up a print job.", "names another tool 'cancel_print_job'"),
    ("Returns a print job as `json`.", "markup or code"),
    ("", "empty"),
])
def test_a_tool_summary_is_one_plain_sentence_about_its_own_records(reply: str, problem: str | None) -> None:
    assert tool_summary_problem(reply, "print job", ["cancel_print_job", "list_print_jobs"]) == problem
