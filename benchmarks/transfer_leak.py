"""The BFCL leak check of the transfer benchmark (issue 39 part 4): no BFCL tool, backend or question in training data.

`bfcl_vocabulary()` reads the installed `bfcl-eval` data (the files the BFCL environments load): every function name
of every test file (single-turn docs, multi-turn backend docs, as BFCL writes them and as envgym exposes them with `.`
written `_`), the backend class names, and every user question. `find_leaks(demos, vocabulary)` reports, per
demonstration ({"messages", "tools"}), what of it is BFCL's:

- a tool offered or called whose name is a BFCL function name (any, even a one-word one like `add`);
- a BFCL function name that is distinctive (it has `_` or `.`, or is a backend class name) written anywhere in the
  conversation or the tool schemas, as a whole identifier;
- a BFCL question copied: any run of `WINDOW` words of a question (lower-cased, punctuation dropped) in the
  conversation's text, or the whole of a question shorter than that but of at least `MIN_WORDS` words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WINDOW = 12
MIN_WORDS = 6
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class BfclVocabulary:
    function_names: frozenset[str]
    class_names: frozenset[str]
    distinctive: frozenset[str]  # names searched for in free text
    question_grams: dict[int, frozenset[str]] = field(default_factory=dict)  # n -> word n-grams of questions
    questions: int = 0


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _user_texts(question: Any) -> Iterable[str]:
    """The user contents of a BFCL `question` (a list of turns, each a list of messages)."""
    for turn in question or []:
        for message in turn if isinstance(turn, list) else [turn]:
            if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
                yield message["content"]


def _data_dir() -> Path:
    from envgym.integrations.bfcl import data

    data.bfcl()  # sets BFCL_PROJECT_ROOT before bfcl_eval is imported
    import bfcl_eval

    return Path(bfcl_eval.__file__).parent / "data"


def bfcl_vocabulary() -> BfclVocabulary:
    """Everything of BFCL's that must not be in training data, read from the installed bfcl-eval's data files."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    from envgym.integrations.bfcl.data import MULTI_TURN_CATEGORIES, SINGLE_TURN_CATEGORIES

    root = _data_dir()
    names: set[str] = set()
    grams: dict[int, set[str]] = {}
    questions = 0
    doc_files = sorted((root / "multi_turn_func_doc").glob("*.json"))
    tests = [root / f"BFCL_v4_{c}.json" for c in SINGLE_TURN_CATEGORIES + MULTI_TURN_CATEGORIES]
    for path in tests + doc_files:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            # A test entry lists its docs under "function" (multi-turn ones name backends: their docs are the
            # multi_turn_func_doc files); a doc file's row is one doc.
            for doc in row.get("function", []) if "name" not in row else [row]:
                if isinstance(doc, dict) and isinstance(doc.get("name"), str):
                    names.add(doc["name"])
            for text in _user_texts(row.get("question")):
                words = _words(text)
                if len(words) < MIN_WORDS:
                    continue
                questions += 1
                n = min(len(words), WINDOW)
                grams.setdefault(n, set()).update(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
    names |= {n.replace(".", "_") for n in names}  # as envgym's BFCL envs name them (data.openai_name)
    classes = frozenset(CLASS_FILE_PATH_MAPPING)
    distinctive = frozenset(n for n in names if "_" in n or "." in n) | classes
    return BfclVocabulary(frozenset(names), classes, distinctive, {n: frozenset(g) for n, g in grams.items()},
                          questions)


def _tool_names(demo: dict[str, Any]) -> set[str]:
    offered = {t.get("function", t).get("name") for t in demo.get("tools") or []}
    called = {c.get("function", c).get("name") for m in demo["messages"] for c in m.get("tool_calls") or []}
    return {n for n in offered | called if isinstance(n, str)}


def _copied_question(words: Sequence[str], vocabulary: BfclVocabulary) -> str | None:
    for n, grams in vocabulary.question_grams.items():
        for i in range(len(words) - n + 1):
            gram = " ".join(words[i : i + n])
            if gram in grams:
                return gram
    return None


def find_leaks(demos: Sequence[dict[str, Any]], vocabulary: BfclVocabulary) -> list[str]:
    """One line per leak found (demonstration index, what, the BFCL text); empty when the data is clean."""
    leaks = []
    for index, demo in enumerate(demos):
        label = demo.get("task_id", index)
        for name in sorted(_tool_names(demo) & vocabulary.function_names):
            leaks.append(f"{label}: tool named {name!r}, a BFCL function")
        text = json.dumps([demo["messages"], demo.get("tools")])
        for name in sorted(set(_IDENT.findall(text)) & vocabulary.distinctive):
            leaks.append(f"{label}: BFCL name {name!r} in its text")
        contents = " ".join(m["content"] for m in demo["messages"] if isinstance(m.get("content"), str))
        copied = _copied_question(_words(contents), vocabulary)
        if copied is not None:
            leaks.append(f"{label}: BFCL question text {copied!r}")
    return leaks
