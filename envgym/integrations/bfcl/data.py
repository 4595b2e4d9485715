"""BFCL's test entries, ground truth and function docs, loaded by BFCL's own loader from the `bfcl-eval` wheel.

`bfcl_eval.constants.eval_config` creates result, score and lock folders under `BFCL_PROJECT_ROOT` when it is
imported (by default next to the installed package, which may be read-only): it is pointed at envgym's cache first.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from pathlib import Path
from typing import Any

from envgym.world.errors import EnvConfigError

MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
# BFCL's single-turn scoring categories (bfcl_eval.constants.category_mapping.SINGLE_TURN_CATEGORY), in its order.
SINGLE_TURN_CATEGORIES = (
    "simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple", "irrelevance",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance", "live_relevance",
)
# Categories graded by whether any call was made, not by the AST checker (they have no possible answers).
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
ALIASES = {"simple": "simple_python", "java": "simple_java", "javascript": "simple_javascript"}

INSTALL_HINT = ("the BFCL environments need the bfcl-eval wheel (installed without its dependencies by "
                "scripts/install.sh: pip install -c constraints.txt --no-deps bfcl-eval)")


def bfcl() -> Any:
    """`bfcl_eval.utils` (BFCL's loaders), imported with its project root in envgym's cache."""
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path.home() / ".cache" / "envgym" / "bfcl"))
    try:
        import bfcl_eval.utils as utils
    except ImportError as exc:
        raise EnvConfigError(f"{INSTALL_HINT} ({exc})") from None
    return utils


def prompts() -> tuple[str, str, str, int]:
    """BFCL's default prompt texts: (its persona and task, its multi-turn behaviour, what the user says on a held-out
    turn, the most steps a turn may take). Its Python output format is left out: the env states its own."""
    bfcl()
    from bfcl_eval.constants import default_prompts as p

    style = p.PROMPT_STYLE_TEMPLATES["classic"]
    return (f"{style['persona']} {style['task']}", style["multiturn_behavior"],
            p.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC, int(p.MAXIMUM_STEP_LIMIT))


def category_of(task_id: str) -> str:
    """The BFCL category of a test entry id (`multi_turn_base_12` -> `multi_turn_base`), as BFCL derives it."""
    return task_id.rsplit("_", 1)[0]


def resolve_category(name: str, choices: tuple[str, ...]) -> str:
    """BFCL's name of a category: `base` and `multi_turn_base` both name multi_turn_base; unknown names raise."""
    for candidate in (name, ALIASES.get(name, name), f"multi_turn_{name}"):
        if candidate in choices:
            return candidate
    raise EnvConfigError(f"unknown BFCL category {name!r}; expected one of {', '.join(choices)}")


_load_lock = threading.Lock()


@functools.cache
def _entries(category: str, hints: bool = True) -> dict[str, str]:
    """Entry id -> the entry as JSON text (each use decodes its own copy)."""
    utils = bfcl()
    # BFCL's loader reads each function-doc file once per entry, under a cross-process file lock (336 locked reads
    # for one multi-turn category, seconds on a busy machine). The files are only read here: while the loader
    # runs, its reads are served once per file and unlocked. Copies, since the loader edits what it reads.
    read: dict[str, str] = {}
    original = utils.load_file

    def load_once(path: Any, sort_by_id: bool = False, use_lock: bool = True) -> list[dict[str, Any]]:
        key = f"{path}:{sort_by_id}"
        if key not in read:
            read[key] = json.dumps(original(path, sort_by_id=sort_by_id, use_lock=False))
        loaded: list[dict[str, Any]] = json.loads(read[key])
        return loaded

    with _load_lock:
        utils.load_file = load_once
        try:
            loaded = utils.load_dataset_entry(category, include_language_specific_hint=hints)
        finally:
            utils.load_file = original
    return {e["id"]: json.dumps(e) for e in loaded}


@functools.cache
def _answers(category: str) -> dict[str, str]:
    """Entry id -> its ground truth as JSON text."""
    if category in RELEVANCE_CATEGORIES:
        return {}
    return {e["id"]: json.dumps(e["ground_truth"]) for e in bfcl().load_ground_truth_entry(category)}


def task_ids(category: str) -> list[str]:
    """The entry ids of a category, in BFCL's file order."""
    return list(_entries(category))


def entry(task_id: str, *, for_checker: bool = False) -> dict[str, Any]:
    """A fresh copy of the test entry `task_id` as BFCL's inference sees it: function docs populated, a miss_func
    entry's held-out docs moved to `missed_function`, language hints added (Java and JavaScript parameters typed
    as strings). `for_checker`: as BFCL's eval runner loads it for its checkers, without the hints."""
    category = category_of(task_id)
    known = category in MULTI_TURN_CATEGORIES + SINGLE_TURN_CATEGORIES
    found = _entries(category, not for_checker).get(task_id) if known else None
    if found is None:
        raise EnvConfigError(f"unknown BFCL task {task_id!r} (ids look like multi_turn_base_0 or simple_python_3)")
    copied: dict[str, Any] = json.loads(found)
    return copied


def ground_truth(task_id: str) -> Any:
    """BFCL's ground truth of a task: per turn a list of call strings (multi-turn), or the possible answers of
    each call (single-turn AST categories); None for the relevance categories."""
    found = _answers(category_of(task_id)).get(task_id)
    return None if found is None else json.loads(found)


def _openai_type(schema: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """One BFCL parameter schema in JSON-schema types (`dict` -> object, `float` -> number, unknown -> string)."""
    out = dict(schema)
    out["type"] = mapping.get(str(schema.get("type", "string")), "string")
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _openai_type(v, mapping) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = _openai_type(schema["items"], mapping)
    return out


def openai_name(name: str) -> str:
    """A BFCL function name as OpenAI-style tool names allow it: BFCL's FC handlers write `.` as `_`."""
    return name.replace(".", "_")


def tool_schemas(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function docs as OpenAI tool schemas, with the type names BFCL's FC handlers send
    (`bfcl_eval.constants.type_mappings.GORILLA_TO_OPENAPI`)."""
    bfcl()
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    tools = []
    for doc in functions:
        parameters = _openai_type(doc.get("parameters") or {"type": "dict", "properties": {}}, GORILLA_TO_OPENAPI)
        parameters["type"] = "object"
        parameters.setdefault("properties", {})
        tools.append({"type": "function", "function": {
            "name": openai_name(doc["name"]), "description": doc.get("description", ""), "parameters": parameters}})
    return tools
