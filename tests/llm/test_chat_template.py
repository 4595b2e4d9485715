"""Chat-template preparation writes tool calls in the format the tokenizer's template speaks."""

from __future__ import annotations

from dataclasses import dataclass

from envgym.llm.chat_template import prepare_messages
from envgym.protocol import parse_action

CALL = {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "#W0001"}'}}
MESSAGES = [{"role": "user", "content": "where is my order?"}, {"role": "assistant", "content": "", "tool_calls": [CALL]}]
TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "d", "parameters": {}}}]


@dataclass
class Tokenizer:
    """Only what prepare_messages reads of a Hugging Face tokenizer: its chat template string."""

    chat_template: str


def test_calls_are_folded_in_the_templates_format() -> None:
    qwen_coder = Tokenizer("{{ '<tool_call>\\n<function=' + name + '>' }}<parameter={{ k }}>")
    plain, _ = prepare_messages(qwen_coder, MESSAGES, None)
    text = plain[1]["content"]
    assert text.startswith("<tool_call>\n<function=get_order>")
    assert [(c.name, c.arguments) for c in parse_action(text, fmt="qwen_xml")[1]] == [("get_order", {"order_id": "#W0001"})]


def test_a_template_without_tools_gets_the_tools_block_of_its_format() -> None:
    mistral = Tokenizer("{{ '[INST]' + m.content + '[/INST]' }}{{ '[TOOL_CALLS][' }}")
    plain, template_tools = prepare_messages(mistral, MESSAGES, TOOLS)
    assert template_tools is None and plain[0]["content"].startswith("[AVAILABLE_TOOLS]")
    assert plain[2]["content"].startswith('[TOOL_CALLS][{"name": "get_order"')


def test_sampled_text_that_already_holds_calls_is_kept_verbatim() -> None:
    sampled = '[get_order(order_id="#W0001")]'
    plain, _ = prepare_messages(Tokenizer("plain"), [{"role": "assistant", "content": sampled, "tool_calls": [CALL]}],
                                None)
    assert plain[0]["content"] == sampled
