"""Quality filters for model rewordings (issue 15, part 5): several lines, the agent's voice, a dropped literal, a
leaked answer or tool name each reject the reply, and the procedural opening stays."""

from __future__ import annotations

import pytest

from envgym.llm import ScriptedChatModel
from envgym.world.spec import Answer, TaskSpec, ToolCall
from synth.quality import paraphrase_problem
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
