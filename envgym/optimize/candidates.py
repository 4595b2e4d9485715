"""What the optimizer searches over: a candidate system prompt, optionally with an ACE playbook, and how two merge.

A playbook is an itemized list kept in the agent's context. It changes only by operations on single items (add,
refine, remove) and by helpful/harmful counters; it is never rewritten whole, so what earlier reflections learned
survives a later, worse one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

OpKind = Literal["add", "refine", "remove"]
OP_KINDS: tuple[str, ...] = ("add", "refine", "remove")
MAX_ITEM_CHARS = 400


class EditError(ValueError):
    """A reflector's edit that cannot be applied; the message names the operation and what was wrong."""


@dataclass(frozen=True)
class PlaybookItem:
    """One playbook entry: a stable id, its text, and how often the reflector found it helpful or harmful."""

    id: str
    text: str
    helpful: int = 0
    harmful: int = 0

    def render(self) -> str:
        return f"[{self.id}] {self.text} (helpful {self.helpful}, harmful {self.harmful})"


@dataclass(frozen=True)
class PlaybookOp:
    """add (text), refine (id, text) or remove (id) one item."""

    op: OpKind
    id: str | None = None
    text: str | None = None


def apply_ops(items: tuple[PlaybookItem, ...], ops: list[PlaybookOp], new_id: list[str]) -> tuple[PlaybookItem, ...]:
    """The playbook after `ops`, in order; `new_id` gives the ids of added items, one per add, in order.

    Raises EditError naming the first operation that does not fit the playbook (unknown id, empty text, ...);
    nothing is applied then.
    """
    out = list(items)
    fresh = iter(new_id)
    for number, op in enumerate(ops, start=1):
        where = f"operation {number} ({op.op})"
        ids = [item.id for item in out]
        if op.op in ("refine", "remove") and op.id not in ids:
            raise EditError(f"{where}: no playbook item {op.id!r} (items: {ids or 'none'})")
        if op.op in ("add", "refine"):
            text = (op.text or "").strip()
            if not text:
                raise EditError(f"{where}: the item text is empty")
            if len(text) > MAX_ITEM_CHARS:
                raise EditError(f"{where}: the item text has {len(text)} characters, more than {MAX_ITEM_CHARS}")
        if op.op == "add":
            item_id = next(fresh, None)
            if item_id is None:
                raise EditError(f"{where}: no id left for a new item")
            out.append(PlaybookItem(item_id, (op.text or "").strip()))
        elif op.op == "refine":
            at = ids.index(str(op.id))
            out[at] = replace(out[at], text=(op.text or "").strip())
        else:
            out.pop(ids.index(str(op.id)))
    return tuple(out)


def count_votes(items: tuple[PlaybookItem, ...], helpful: list[str], harmful: list[str]) -> tuple[PlaybookItem, ...]:
    """Items with their counters raised by the reflector's votes; votes for ids not in the playbook are ignored
    (an item the same reply removed, say)."""
    return tuple(replace(i, helpful=i.helpful + helpful.count(i.id), harmful=i.harmful + harmful.count(i.id))
                 for i in items)


@dataclass(frozen=True)
class Candidate:
    """A system prompt (and, in playbook mode, the playbook appended to it) with where it came from."""

    id: str
    prompt: str
    playbook: tuple[PlaybookItem, ...] = ()
    parents: tuple[str, ...] = ()
    origin: str = "seed"  # seed, reflection or merge
    critique: str = ""
    ops: tuple[PlaybookOp, ...] = field(default=())

    def system_text(self) -> str:
        """What the agent sees as its system message."""
        if not self.playbook:
            return self.prompt
        return self.prompt + "\n\n# Playbook\n" + "\n".join(f"- {item.render()}" for item in self.playbook)


def merge_candidates(a: Candidate, b: Candidate, new_id: str) -> Candidate:
    """One candidate holding what two front candidates learned: the prompt's lines of `a` followed by the lines of
    `b` that `a` lacks, and the union of their playbook items by id (counters: the larger of the two)."""
    a_lines = a.prompt.splitlines()
    prompt = "\n".join([*a_lines, *(line for line in b.prompt.splitlines() if line not in a_lines)])
    items = {item.id: item for item in a.playbook}
    for item in b.playbook:
        mine = items.get(item.id)
        items[item.id] = item if mine is None else replace(
            mine, helpful=max(mine.helpful, item.helpful), harmful=max(mine.harmful, item.harmful))
    return Candidate(new_id, prompt, tuple(items.values()), parents=(a.id, b.id), origin="merge")
