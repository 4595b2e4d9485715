"""Render OpenAI-format conversations to text with a tokenizer's chat template.

The local model and the trainer both go through `render_chat`, so the prompt the sampler saw and the
tokens the trainer re-renders for env messages come from one function.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from envgym.protocol import Renderer, ToolCall, detect_format, parse_text_calls, renderer


def template_renders_tools(tokenizer: Any) -> bool:
    """True when the tokenizer's chat template reads the `tools` variable itself (Qwen, Llama 3.1)."""
    template = tokenizer.chat_template or ""
    return isinstance(template, str) and "tools" in template


def tool_format(tokenizer: Any) -> Renderer:
    """The tool-call renderer this tokenizer's chat template speaks (markers in the template; Hermes if none)."""
    template = getattr(tokenizer, "chat_template", None)
    return renderer(detect_format(template if isinstance(template, str) else None))


def _openai_calls(tool_calls: list[dict[str, Any]]) -> list[ToolCall]:
    calls = []
    for call in tool_calls:
        function = call.get("function", call)
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        calls.append(ToolCall(str(function.get("name")), arguments))
    return calls


def hermes_tool_call_text(tool_calls: list[dict[str, Any]]) -> str:
    """OpenAI `tool_calls` as Hermes `<tool_call>` blocks (`envgym.protocol` format), one a line, in order."""
    return renderer("hermes").calls(_openai_calls(tool_calls))


def _plain_message(message: dict[str, Any], render: Renderer) -> dict[str, Any]:
    """A message whose `content` is a string, with assistant `tool_calls` folded into the text in `render`'s format.

    Assistant text that already holds tool calls (the raw sampled text) is kept verbatim so the re-render
    reproduces what the model generated.
    """
    content = message.get("content")
    if content is None:
        content = ""
    elif not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    tool_calls = message.get("tool_calls")
    if message.get("role") == "assistant" and tool_calls and not parse_text_calls(content, ""):
        calls_text = render.calls(_openai_calls(tool_calls))
        content = f"{content}\n{calls_text}" if content else calls_text
    return {"role": message["role"], "content": content}


def prepare_messages(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Messages and tools in the form `apply_chat_template` of this tokenizer accepts.

    Tool calls are written in the format the template speaks (`tool_format`). When the template does not render
    tools itself, that format's tools block is appended to the system message (one is created if the conversation
    has none) and `tools` is returned as None.
    """
    render = tool_format(tokenizer)
    plain = [_plain_message(m, render) for m in messages]
    if not tools or template_renders_tools(tokenizer):
        return plain, tools or None
    block = render.tools_prompt(tools)
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
