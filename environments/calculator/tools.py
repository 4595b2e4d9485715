"""The calculator tool: safe arithmetic over Python's AST (no names, calls or attributes)."""

from __future__ import annotations

import ast
import operator

from envgym.world import ToolError, WorldState

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ToolError("exponent too large (at most 64)")
        return _BINARY[type(node.op)](left, right)  # type: ignore[no-any-return]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))  # type: ignore[no-any-return]
    raise ToolError(f"unsupported expression element: {ast.dump(node)[:60]}")


def calculate(state: WorldState, expression: str) -> dict[str, int | float]:
    try:
        tree = ast.parse(expression.replace("×", "*").replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"cannot parse expression {expression!r}: {exc.msg}") from None
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return {"result": value}
