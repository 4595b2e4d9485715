"""Render OpenAI-format conversations to text with a tokenizer's chat template.

The local model and the trainer both go through `render_chat`, so the prompt the sampler saw and the
tokens the trainer re-renders for env messages come from one function.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from envgym.protocol import format_tool_call, render_tools_prompt


def template_renders_tools(tokenizer: Any) -> bool:
    """True when the tokenizer's chat template reads the `tools` variable itself (Qwen, Llama 3.1)."""
    template = tokenizer.chat_template or ""
    return isinstance(template, str) and "tools" in template


def hermes_tool_call_text(tool_calls: list[dict[str, Any]]) -> str:
    """OpenAI `tool_calls` as Hermes `<tool_call>` blocks (`envgym.protocol` format), one a line, in order."""
    blocks = []
    for call in tool_calls:
        function = call.get("function", call)
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        blocks.append(format_tool_call(str(function.get("name")), arguments))
    return "\n".join(blocks)


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message whose `content` is a string, with assistant `tool_calls` folded into the text.

    Assistant text that already holds `<tool_call>` blocks (the raw sampled text) is kept verbatim so the
    re-render reproduces what the model generated.
    """
    content = message.get("content")
    if content is None:
        content = ""
    elif not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    tool_calls = message.get("tool_calls")
    if message.get("role") == "assistant" and tool_calls and "<tool_call>" not in content:
        calls_text = hermes_tool_call_text(tool_calls)
        content = f"{content}\n{calls_text}" if content else calls_text
    return {"role": message["role"], "content": content}


def prepare_messages(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Messages and tools in the form `apply_chat_template` of this tokenizer accepts.

    When the template does not render tools itself, the Hermes tools block of `envgym.protocol` is appended to the system
    message (one is created if the conversation has none) and `tools` is returned as None.
    """
    plain = [_plain_message(m) for m in messages]
    if not tools or template_renders_tools(tokenizer):
        return plain, tools or None
    block = render_tools_prompt(tools)
    if plain and plain[0]["role"] == "system":
        plain[0] = {"role": "system", "content": f"{plain[0]['content']}\n\n{block}"}
    else:
        plain.insert(0, {"role": "system", "content": block})
    return plain, None


def render_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool,
) -> str:
    """The conversation as the model sees it (text, special tokens included)."""
    plain, template_tools = prepare_messages(tokenizer, messages, tools)
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
    if template_tools:
        kwargs["tools"] = template_tools
    text = tokenizer.apply_chat_template(plain, **kwargs)
    assert isinstance(text, str)
    return text


def encode_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool,
) -> list[int]:
    """Token ids of `render_chat` (the template already holds every special token, so none are added)."""
    text = render_chat(tokenizer, messages, tools, add_generation_prompt=add_generation_prompt)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
