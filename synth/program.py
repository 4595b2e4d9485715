"""Task programs: typed steps over tools, and the one interpreter that both builds a task's reference solution and
drives the fair planner.

A program asks the user for facts, calls tools with arguments drawn from those facts and from earlier results,
picks a record from a list (by a fact the user gave, or the smallest/largest by a field), branches on a looked-up
value, iterates over a filtered set, and answers with values it computed. `run` is a generator: it yields requests
(`Ask`, `CallRequest`, `Reply`) and is sent the user's value or the tool's result, so it never sees anything the
conversation does not hold.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envgym.world.spec import ToolSpec
from envgym.world.tools import compare


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Expr(_Step):
    """A value: a fact the user gave (`user`), a path into a saved result (`var`), or a literal from the opening."""

    src: Literal["user", "var", "lit"]
    key: str = ""
    path: list[str | int] = Field(default_factory=list)
    value: Any = None
    cast: Literal["str", "int", "float"] = "str"
    reduce: Literal["count", "sum", "min", "max"] | None = Field(None, description="computed over a saved list")
    field: str = ""


class AskStep(_Step):
    kind: Literal["ask"] = "ask"
    key: str


class CallStep(_Step):
    kind: Literal["call"] = "call"
    tool: str
    args: dict[str, Expr | dict[str, Expr]]
    save: str = ""
    write: bool = False


class PickStep(_Step):
    """Choose one element of a saved list: the one whose `field` equals `equals`, or the min/max by `field`."""

    kind: Literal["pick"] = "pick"
    source: Expr
    field: str
    how: Literal["eq", "min", "max"]
    equals: Expr | None = None
    save: str


class BranchStep(_Step):
    kind: Literal["branch"] = "branch"
    left: Expr
    op: Literal["lt", "le", "gt", "ge", "eq", "ne"]
    right: Expr
    then: list[Step]
    otherwise: list[Step] = Field(default_factory=list)


class EachStep(_Step):
    kind: Literal["each"] = "each"
    source: Expr
    var: str
    body: list[Step]


class AnswerStep(_Step):
    kind: Literal["answer"] = "answer"
    values: list[Expr]
    template: str = Field(description="the reply, with {0}, {1}... for the values")


Step = AskStep | CallStep | PickStep | BranchStep | EachStep | AnswerStep


class Program(_Step):
    steps: list[Step]


for _model in (BranchStep, EachStep, Program):
    _model.model_rebuild()


@dataclass(frozen=True)
class Ask:
    key: str


@dataclass(frozen=True)
class CallRequest:
    tool: str
    arguments: dict[str, Any]
    write: bool


@dataclass(frozen=True)
class Reply:
    text: str
    values: tuple[Any, ...]


class ProgramError(Exception):
    """The program cannot go on (a result lacks a field, a pick found nothing): the task sample is invalid."""


def _cast(value: Any, cast: str) -> Any:
    if cast == "str" or value is None:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ProgramError(f"{value!r} is not a number") from None
    return int(number) if cast == "int" else number


TEXT_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 _-]{0,39}):[ \t]+(\S.*?)\s*$")


def text_fields(text: str) -> dict[str, str]:
    """The `Key: value` lines of a text result, the first of each key: a tool that answers in prose (mcp-server-git's
    log: `Commit: 14a0...`) is read through them, so a path's string part into a text names one such line."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        found = TEXT_FIELD.match(line)
        if found and found.group(1) not in fields:
            fields[found.group(1)] = found.group(2)
    return fields


def _get(value: Any, path: list[str | int]) -> Any:
    for part in path:
        if isinstance(value, str) and isinstance(part, str) and part in (fields := text_fields(value)):
            value = fields[part]
            continue
        in_list = isinstance(value, list) and isinstance(part, int) and -len(value) <= part < len(value)
        if not in_list and not (isinstance(value, dict) and part in value):
            raise ProgramError(f"no {part!r} in {str(value)[:80]}")
        value = value[part]
    return value


Run = Generator[Ask | CallRequest | Reply, Any, None]


def run(program: Program) -> Run:
    """Interpret `program`: yields what it needs next; send the user's answer to an Ask, the tool's result to a
    CallRequest, and None to a Reply."""
    env: dict[str, Any] = {}
    yield from _steps(program.steps, env)


def _reduce(items: Any, how: str, field: str) -> Any:
    if not isinstance(items, list):
        raise ProgramError("a computed value needs a list")
    if how == "count":
        return len(items)
    numbers = [x[field] for x in items if isinstance(x, dict) and isinstance(x.get(field), int | float)]
    if not numbers:
        raise ProgramError(f"no numeric {field} to compute over")
    return round(sum(numbers), 2) if how == "sum" else (min(numbers) if how == "min" else max(numbers))


def _value(expr: Expr, env: dict[str, Any]) -> Any:
    if expr.reduce is not None:
        return _reduce(_get(env.get(expr.key), expr.path), expr.reduce, expr.field)
    if expr.src == "lit":
        return expr.value
    if expr.src == "user":
        if expr.key not in env.get("user", {}):
            raise ProgramError(f"the user has not given {expr.key}")
        return _cast(env["user"][expr.key], expr.cast)
    return _cast(_get(env.get(expr.key), expr.path), expr.cast)


def _args(args: dict[str, Expr | dict[str, Expr]], env: dict[str, Any]) -> dict[str, Any]:
    return {k: ({ik: _value(iv, env) for ik, iv in v.items()} if isinstance(v, dict) else _value(v, env))
            for k, v in args.items()}


def _pick(step: PickStep, env: dict[str, Any]) -> Any:
    items = _value(step.source, env)
    if not isinstance(items, list) or not items:
        raise ProgramError("nothing to pick from")
    if step.how == "eq":
        assert step.equals is not None
        want = _value(step.equals, env)
        found = [x for x in items if isinstance(x, dict) and str(x.get(step.field)) == str(want)]
        if len(found) != 1:
            raise ProgramError(f"{len(found)} items have {step.field} = {want!r}")
        return found[0]
    ranked = [x for x in items if isinstance(x, dict) and isinstance(x.get(step.field), int | float)]
    if not ranked:
        raise ProgramError(f"no item has a numeric {step.field}")
    best = min(ranked, key=lambda x: x[step.field]) if step.how == "min" else max(ranked, key=lambda x: x[step.field])
    if sum(x[step.field] == best[step.field] for x in ranked) > 1:
        raise ProgramError("a tie: the smallest/largest is ambiguous")
    return best


def _steps(steps: list[Step], env: dict[str, Any]) -> Run:
    for step in steps:
        if isinstance(step, AskStep):
            env.setdefault("user", {})[step.key] = yield Ask(step.key)
        elif isinstance(step, CallStep):
            result = yield CallRequest(step.tool, _args(step.args, env), step.write)
            if step.save:
                env[step.save] = result
        elif isinstance(step, PickStep):
            env[step.save] = _pick(step, env)
        elif isinstance(step, BranchStep):
            taken = compare(_value(step.left, env), step.op, _value(step.right, env))
            yield from _steps(step.then if taken else step.otherwise, env)
        elif isinstance(step, EachStep):
            items = _value(step.source, env)
            for item in items if isinstance(items, list) else []:
                env[step.var] = item
                yield from _steps(step.body, env)
        else:
            values = tuple(_value(v, env) for v in step.values)
            yield Reply(step.template.format(*values), values)


def shape(program: Program, tools: dict[str, str]) -> str:
    """The program's structure: step kinds, the operator of each tool called, branches and picks, no names."""
    def walk(steps: list[Step]) -> list[str]:
        out = []
        for s in steps:
            if isinstance(s, AskStep):
                out.append("ask")
            elif isinstance(s, CallStep):
                out.append(f"call:{tools.get(s.tool, '?')}")
            elif isinstance(s, PickStep):
                out.append(f"pick:{s.how}")
            elif isinstance(s, BranchStep):
                out.append(f"if:{s.op}({','.join(walk(s.then))}|{','.join(walk(s.otherwise))})")
            elif isinstance(s, EachStep):
                out.append(f"each({','.join(walk(s.body))})")
            else:
                out.append(f"answer:{len(s.values)}")
        return out
    return ">".join(walk(program.steps))


def bind(spec: ToolSpec, avail: dict[str, Expr]) -> dict[str, Any]:
    """Arguments for `spec` from the available values by parameter name (nested objects too); a required
    parameter without a value makes the segment unfit."""
    def walk(schema: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, sub in schema.get("properties", {}).items():
            if sub.get("type") == "object":
                inner = walk(sub)
                if inner or name in schema.get("required", []):
                    out[name] = inner
            elif name in avail:
                out[name] = avail[name]
            elif name in schema.get("required", []):
                raise ProgramError(f"{spec.name} needs {name}")
        missing = [r for r in schema.get("required", []) if r not in out]
        if missing:
            raise ProgramError(f"{spec.name} needs {missing}")
        return out
    return walk(spec.parameters)
