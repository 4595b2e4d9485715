"""BFCL's own graders, called as its eval runner calls them: the multi-turn checker (state of every backend and
the responses of each turn) and the AST checker of the single-turn categories, plus its relevance rule.

Two things are arranged around them, neither changes a verdict:
- BFCL's executor keeps backend instances in its module's globals, keyed by model name and entry id, and never
  drops them; every checker run here gets a fresh model name and its instances are removed afterwards.
- `ast_checker.py` imports `bfcl_eval.constants.model_config` only for `MODEL_CONFIG_MAPPING[model].underscore_to_dot`,
  and that module imports every provider SDK BFCL supports. While the checker is imported, a small module stands in
  for it with one model, `envgym`, an FC model whose tool names have `.` written as `_` (as OpenAI-style names
  must); it is removed again so that the real module stays importable where its SDKs are installed.
"""

from __future__ import annotations

import itertools
import re
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any

from envgym.integrations.bfcl.data import RELEVANCE_CATEGORIES, bfcl

MODEL_NAME = "envgym"  # no underscore: BFCL maps `_` in model names back to `/` before its config lookup
_names = itertools.count()
_import_lock = threading.Lock()


@dataclass(frozen=True)
class Verdict:
    """BFCL's verdict on one entry: `valid`, and when not, its `error_type` and `error_message`."""

    valid: bool
    error_type: str = ""
    error_message: str = ""

    def as_info(self) -> dict[str, Any]:
        return {"valid": self.valid, "error_type": self.error_type, "error_message": self.error_message}


def fresh_model_name(purpose: str) -> str:
    """A model name no other run in this process uses: BFCL's executor keys its backend instances by it."""
    return f"envgym_{purpose}_{next(_names)}"


def drop_instances(model_name: str) -> None:
    """Remove the backend instances BFCL's executor keeps in its globals for `model_name` (and its `_eval` and
    `_ground_truth_eval` runs)."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    prefix = re.sub(r"[-./:]", "_", model_name) + "_"
    for key in [k for k in list(multi_turn_utils.__dict__) if k.startswith(prefix)]:
        multi_turn_utils.__dict__.pop(key, None)


def multi_turn_verdict(decoded: list[list[list[str]]], ground_truth: list[list[str]], entry: dict[str, Any]) -> Verdict:
    """BFCL's multi-turn verdict on the decoded calls of every turn (per turn, per step, the call strings), as
    `_evaluate_single_multi_turn_entry` reaches it: fewer turns than the ground truth is a forced termination."""
    bfcl()
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if len(decoded) != len(ground_truth):
        return Verdict(False, "multi_turn:force_terminated",
                       f"Model was force-terminated during inference phase. The length of the model result turns "
                       f"({len(decoded)}) does not match the length of the ground truth turns ({len(ground_truth)}).")
    model_name = fresh_model_name("check")
    # BFCL drops steps whose decoding was empty before checking; an empty step list is never passed on.
    turns = [[step for step in turn if step] for turn in decoded]
    try:
        result = multi_turn_checker(turns, ground_truth, entry, entry["id"].rsplit("_", 1)[0], model_name)
    finally:
        drop_instances(model_name)
    if result["valid"]:
        return Verdict(True)
    return Verdict(False, str(result.get("error_type", "")), str(result.get("error_message", "")))


def _ast_checker_module() -> types.ModuleType:
    bfcl()
    name = "bfcl_eval.constants.model_config"
    with _import_lock:
        loaded = sys.modules.get("bfcl_eval.eval_checker.ast_eval.ast_checker")
        if loaded is not None:
            return loaded
        stand_in = name not in sys.modules
        if stand_in:
            module = types.ModuleType(name, "Stand-in for BFCL's model table while its AST checker is imported.")
            module.MODEL_CONFIG_MAPPING = {MODEL_NAME: types.SimpleNamespace(underscore_to_dot=True)}  # type: ignore[attr-defined]
            sys.modules[name] = module
        try:
            import bfcl_eval.eval_checker.ast_eval.ast_checker as checker
        finally:
            if stand_in:
                del sys.modules[name]
        checker.MODEL_CONFIG_MAPPING.setdefault(MODEL_NAME, types.SimpleNamespace(underscore_to_dot=True))
        return checker


def language_of(category: str) -> Any:
    """BFCL's `Language` of a category (Java and JavaScript entries have their own type conversions)."""
    from bfcl_eval.constants.enums import Language

    if "javascript" in category:
        return Language.JAVASCRIPT
    if "java" in category:
        return Language.JAVA
    return Language.PYTHON


def single_turn_verdict(decoded: list[dict[str, Any]] | None, entry: dict[str, Any], possible_answer: Any,
                        category: str) -> Verdict:
    """BFCL's verdict on one single-turn response: `decoded` is the calls as `{name: {param: value}}`, or None
    when the response did not decode (plain text, a malformed call)."""
    from bfcl_eval.utils import is_empty_output

    if category in RELEVANCE_CATEGORIES:
        called = decoded is not None and not is_empty_output(decoded)
        if "irrelevance" in category:
            return Verdict(True) if not called else Verdict(
                False, "irrelevance_error:decoder_success", "Valid syntax. Successfully decode AST when it should not.")
        return Verdict(True) if called else Verdict(
            False, "relevance_error:decoder_failed", "Invalid syntax. Failed to decode AST when it should have.")
    if decoded is None:
        return Verdict(False, "ast_decoder:decoder_failed", "Invalid syntax. Failed to decode AST.")
    checker = _ast_checker_module()
    result = checker.ast_checker(entry["function"], decoded, possible_answer, language_of(category), category,
                                 MODEL_NAME)
    if result["valid"]:
        return Verdict(True)
    return Verdict(False, str(result.get("error_type", "")), "; ".join(map(str, result.get("error", []))))
