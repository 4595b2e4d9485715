"""Quality filters for model outputs that enter tasks and tools: a reworded opening is used only if it is still one
message from the user that states every literal and gives nothing away; a tool's reworded summary only if it is one
plain sentence about the tool's own records."""

from __future__ import annotations

import re

from envgym.users import AGENT_VOICE
from envgym.world.spec import TaskSpec

MAX_CHARS = 400


def paraphrase_problem(reply: str, task: TaskSpec) -> str | None:
    """Why `reply`, a model's rewording of `task.opening`, cannot replace it; None when it can."""
    text = reply.strip()
    if not text:
        return "empty"
    if "\n" in text:
        return "several lines"
    if len(text) > MAX_CHARS:
        return f"longer than {MAX_CHARS} characters"
    if "<" in text or "{" in text:
        return "markup or a tool call"
    if AGENT_VOICE.search(text):
        return "speaks as the agent"
    for literal in (str(v) for v in task.meta.get("literals", [])):
        if literal not in text:
            return f"drops {literal!r}"
    opening = task.opening.lower()
    for answer in task.answers:
        if len(answer.value) > 1 and answer.value.lower() not in opening and answer.value.lower() in text.lower():
            return f"leaks the answer {answer.value!r}"
    for call in task.solution:
        if call.name.lower() in text.lower() and call.name.lower() not in opening:
            return f"names the tool {call.name!r}"
    return None


MAX_SUMMARY_CHARS = 160
FIRST_PERSON = re.compile(r"\b(i|i'm|i'll|me|my|we|our)\b", re.IGNORECASE)


def tool_summary_problem(reply: str, label: str, other_tools: list[str]) -> str | None:
    """Why `reply`, a model's one-sentence summary of a tool over `label` records, cannot replace the procedural one;
    None when it can. `other_tools` are the names of the domain's other tools (a summary must not point at them)."""
    text = reply.strip()
    if not text:
        return "empty"
    if "\n" in text:
        return "several lines"
    if len(text) > MAX_SUMMARY_CHARS:
        return f"longer than {MAX_SUMMARY_CHARS} characters"
    if "<" in text or "{" in text or "`" in text:
        return "markup or code"
    if AGENT_VOICE.search(text) or FIRST_PERSON.search(text):
        return "speaks as someone"
    if label.lower() not in text.lower():
        return f"does not say it is about {label} records"
    for name in other_tools:
        if name.lower() in text.lower():
            return f"names another tool {name!r}"
    return None
