"""Calls between envgym's parsed tool calls and BFCL's forms: the Python call strings BFCL's executor and
multi-turn checker evaluate, and the `{name: {param: value}}` dicts its AST checker reads.

BFCL's executor runs a call string with `eval` in the namespace of `bfcl_eval...multi_turn_utils`, where `open`,
`exec` and the module's imports are in scope. A string is built here only for a call of a known backend method
with identifier keywords and JSON values (whose `repr` is a Python literal); any other call becomes the string
literal of the error text BFCL would have returned for it, so nothing an agent writes is evaluated as code.
"""

from __future__ import annotations

import ast
import inspect
import keyword
from collections.abc import Callable, Collection
from typing import Any


def _is_keyword_name(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def call_string(name: str, arguments: Any, methods: Collection[str]) -> str:
    """The BFCL call string of one call (as `convert_to_function_call` writes it: `name(k=repr(v),...)`), or for a
    call that may not be evaluated, a string literal holding the error BFCL's executor reports for it."""
    if name not in methods or not _is_keyword_name(name):
        return repr(f"Error during execution: name {name!r} is not defined")
    if not isinstance(arguments, dict):
        return repr(f"Error during execution: arguments of {name} are not an object")
    bad = [k for k in arguments if not _is_keyword_name(k)]
    if bad:
        return repr(f"Error during execution: invalid syntax (argument name {bad[0]!r})")
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def parse_call_string(text: str, signature: Callable[[str], inspect.Signature | None]) -> tuple[str, dict[str, Any]]:
    """(name, keyword arguments) of a ground-truth call string such as `sort('report.pdf')`; positional arguments
    are named by `signature(name)`, the backend method's signature. Raises ValueError on anything else."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a call of a function by name: {text!r}")
    name = node.func.id
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    if node.args:
        sig = signature(name)
        if sig is None:
            raise ValueError(f"{name}: positional arguments but no known signature")
        params = [p for p in sig.parameters if p != "self"]
        for param, value in zip(params, node.args, strict=False):
            kwargs[param] = ast.literal_eval(value)
    return name, kwargs
