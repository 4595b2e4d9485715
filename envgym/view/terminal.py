"""The terminal transcript of one episode (`envgym run`): every turn, then the grade and why it failed."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table

from envgym.protocol import strip_tool_calls
from envgym.view.explain import COMPONENT_MEANING, Explanation
from envgym.view.records import EpisodeRecord

FOLD = 400
"""Characters of a tool result or user turn shown before the rest is folded (`envgym view` shows all of it)."""


def fold(text: str, limit: int = FOLD) -> str:
    """`text` cut to `limit` characters, saying how many were left out."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters folded]"


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function", call)
    args = fn.get("arguments", "")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return f"{fn.get('name', '?')}({args})"


def _verdict_text(held: dict[str, Any]) -> str:
    outcome = "approved" if held["approved"] else "denied"
    return f"guard held {held['tool']} ({outcome}): {'; '.join(held['reasons']) or 'no reason recorded'}"


def print_transcript(console: Console, record: EpisodeRecord, why: Explanation, *, title: str = "") -> None:
    """Print `record` turn by turn, then its reward components, failed rules and answers, the state diff against
    the target and the guard's verdicts."""
    reward = "ungraded" if record.reward is None else f"{record.reward:.3f}"
    label = f" ({why.failure})" if why.failure else ""
    head = f"{title}{record.env} · task {record.task_id} · seed {record.seed} · reward {reward}{label}"
    console.print(Rule(escape(head)))
    broke_at: dict[int, list[str]] = {}
    for rule, indices in why.violations.items():
        for i in indices:
            broke_at.setdefault(i, []).append(rule)
    held_at: dict[int, list[dict[str, Any]]] = {}
    for held in why.guard:
        held_at.setdefault(held["message"] if held["message"] is not None else -1, []).append(held)
    for index, message in enumerate(record.messages):
        role, content = message.get("role"), str(message.get("content") or "")
        if role == "system":
            console.print(f"[dim]system prompt ({len(content)} characters, not shown)[/dim]")
        elif role == "user":
            console.print(f"[bold green]user[/bold green]      {escape(fold(content))}")
        elif role == "assistant":
            text = strip_tool_calls(content).strip()
            if text or not message.get("tool_calls"):
                console.print(f"[bold cyan]assistant[/bold cyan] {escape(fold(text) or '(empty turn)')}")
            for call in message.get("tool_calls") or []:
                console.print(f"  [cyan]→ call[/cyan]  {escape(_call_text(call))}")
        elif role == "tool":
            style = "red" if content.startswith(("guard:", "Error", "error")) or '"error"' in content[:40] else "dim"
            console.print(f"  [{style}]← {escape(str(message.get('name', 'result')))}[/{style}] "
                          f"{escape(fold(content))}")
        if index in broke_at:
            console.print(f"  [bold red]✗ broke {', '.join(broke_at[index])}[/bold red]")
        for held in held_at.get(index, []):
            console.print(f"  [bold yellow]⚑ {escape(_verdict_text(held))}[/bold yellow]")
    for held in held_at.get(-1, []):
        console.print(f"[bold yellow]⚑ {escape(_verdict_text(held))}[/bold yellow]")
    print_verdict(console, record, why)


def print_verdict(console: Console, record: EpisodeRecord, why: Explanation) -> None:
    """The grade: components with pass/fail marks, then what failed and how the world differs from the target."""
    if record.components:
        marks = "  ".join(f"{name} {'[green]✓[/green]' if value >= 1.0 else '[red]✗[/red]'}"
                          for name, value in record.components.items())
        console.print(f"[bold]reward components[/bold]  {marks}")
    for name in why.failed_components:
        meaning = COMPONENT_MEANING.get(name, "this component of the grade is below 1")
        console.print(f"[bold red]✗ {escape(name)}[/bold red]: {escape(meaning)}")
    for answer in why.answers:
        if answer["ok"]:
            continue
        parts = [f"expected {answer['expected']}"]
        if answer["missing"]:
            parts.append(f"not said {answer['missing']}")
        if answer["wrong_choices"]:
            parts.append(f"wrong choices said {answer['wrong_choices']}")
        if answer["extra"]:
            parts.append(f"other values offered {answer['extra']}")
        console.print(f"[red]answer ({answer['type']})[/red]  {escape('; '.join(parts))}")
    if why.diff:
        table = Table("entity", "key", "field", "", "episode", "target", title="world state against the task's target")
        for change in why.diff:
            table.add_row(change["entity"], change["key"], change["field"] or "", change["kind"],
                          escape(fold(json.dumps(change["episode"], ensure_ascii=False), 60)),
                          escape(fold(json.dumps(change["target"], ensure_ascii=False), 60)))
        console.print(table)
    elif why.replay_note is None and record.components.get("state", 1.0) >= 1.0:
        console.print("[green]world state equals the task's target[/green]")
    if why.replay_note:
        console.print(f"[dim]{escape(why.replay_note)}[/dim]")
    for note in why.notes:
        console.print(f"[yellow]{escape(note)}[/yellow]")
