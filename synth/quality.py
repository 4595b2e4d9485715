"""Quality filters for model outputs that enter tasks and tools: a reworded opening is used only if it is still one
message from the user that states every literal and gives nothing away; a tool's reworded summary only if it is one
plain sentence about the tool's own records; a tool's proposed name only if it is a short snake_case identifier no
other tool holds, a verb of the tool's own kind first, then its own records."""

from __future__ import annotations

import re

from envgym.integrations.trl import RESERVED
from envgym.play.tool_turns import USER_TOOL
from envgym.protocol.calls import INVALID_CALL_NAME
from envgym.users import AGENT_VOICE
from envgym.world.spec import TaskSpec
from synth.lexicon import a

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


MAX_NAME_CHARS = 64  # ToolSpec's bound, and OpenAI's on function names
SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
# Names the agent-facing machinery claims: TRL's environment hooks, the user tool, the malformed-call observation.
RESERVED_TOOL_NAMES = frozenset({*RESERVED, USER_TOOL, INVALID_CALL_NAME})
# Leading verbs by meaning. A status change ("transition") is named by its own workflow verb (passed per tool) or by
# "mark" with the status it sets; the generic update verbs would hide which status that is.
VERBS: dict[str, frozenset[str]] = {
    "read": frozenset({"get", "fetch", "find", "search", "list", "lookup", "look_up", "browse", "show", "view",
                       "query", "read", "retrieve", "count", "total", "sum", "compute", "calculate", "lowest",
                       "highest", "min", "max", "verify", "authenticate", "identify", "describe", "summarize"}),
    "create": frozenset({"create", "add", "open", "new", "make", "register", "book", "place", "submit", "insert"}),
    "update": frozenset({"update", "change", "set", "edit", "modify", "adjust"}),
    "delete": frozenset({"delete", "remove", "erase", "destroy", "drop", "purge"}),
    "transition": frozenset({"mark", "cancel", "approve", "reject", "close", "confirm", "complete", "archive",
                             "ship", "refund", "move", "pause", "resume", "activate", "deactivate", "suspend"}),
}


def _leading_verb(name: str, verbs: set[str]) -> str | None:
    """The longest of `verbs` the name starts with, as whole words."""
    found = [v for v in verbs if name == v or name.startswith(v + "_")]
    return max(found, key=len) if found else None


def _has_words(name: str, phrase: str) -> bool:
    words, want = name.split("_"), phrase.replace(" ", "_").split("_")
    return any(words[i:i + len(want)] == want for i in range(len(words)))


def entities_named(name: str, forms: dict[str, str]) -> list[str]:
    """The entities whose name or plural (`forms`: form -> entity) appear in `name` as whole words, longest first at
    each word: "order_items_of_order" names order_item, then order."""
    words, out, i = name.split("_"), [], 0
    spans = sorted(((f.split("_"), e) for f, e in forms.items()), key=lambda x: -len(x[0]))
    while i < len(words):
        hit = next(((n, e) for n, e in spans if words[i:i + len(n)] == n), None)
        if hit is None:
            i += 1
            continue
        out.append(hit[1])
        i += len(hit[0])
    return out


def tool_name_problem(reply: str, kind: str, own: set[str], forms: dict[str, str], taken: set[str],
                      verbs: tuple[str, ...] = (), status: str = "") -> str | None:
    """Why `reply`, a model's name for a tool of meaning `kind` (read, create, update, delete, transition) over the
    entities `own`, cannot replace the procedural name; None when it can. `forms` maps every entity name and plural of
    the domain to its entity; `taken` holds the names other tools have or may fall back to; `verbs` are the tool's
    own verbs beside its kind's (a transition's workflow verb), `status` the status a transition sets."""
    name = reply.strip()
    if not name:
        return "empty"
    if "\n" in name:
        return "several lines"
    if not SNAKE_CASE.match(name):
        return "not a snake_case identifier"
    if len(name) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    if name in RESERVED_TOOL_NAMES:
        return f"a reserved tool name ({name})"
    if name in taken:
        return f"another tool's name ({name})"
    allowed = set(verbs) | ({"mark"} if kind == "transition" else VERBS[kind])
    known = set().union(*VERBS.values()) | allowed
    verb = _leading_verb(name, known)
    if verb is None:
        return f"no {kind} verb first"
    if verb not in allowed:
        other = next(k for k, vs in VERBS.items() if verb in vs)
        return f"another {kind}'s verb ({verb})" if other == kind else f"{a(kind)} tool named like {a(other)} ({verb})"
    rest = name[len(verb):].lstrip("_")
    if verb == "mark" and not any(_has_words(rest, w) for w in (status, *verbs) if w):
        return f"marks without the status it sets ({status})"
    named = entities_named(rest, forms)
    foreign = [e for e in named if e not in own]
    if foreign:
        return f"names another entity ({foreign[0]})"
    if not named:
        return f"does not name its records ({' or '.join(sorted(own))})"
    return None
