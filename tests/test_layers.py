"""The import graph: no cycles, and imports only go down the layers of ARCHITECTURE.md."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Bottom up. A module may import its own layer and the layers below, never above. `envgym/__init__.py` is the
# package's front door (it imports env and RemoteEnv to register them) and stands outside the layers.
LAYERS: list[tuple[str, ...]] = [
    ("envgym.world", "envgym.protocol", "envgym.spaces", "envgym.registry", "envgym.llm"),
    # The loader checks each task's answers with the rubric's reader as it loads, so it sits with the rewards.
    ("envgym.rewards", "envgym.guard", "envgym.users", "envgym.loader"),
    ("envgym.env", "envgym.mixture"),
    ("envgym.play", "envgym.view"),
    ("envgym.sandbox", "envgym.remote", "envgym.sandboxed", "envgym.serve", "envgym.train", "envgym.optimize",
     "envgym.deploy", "envgym.k8s_render", "envgym.integrations", "synth"),
    ("envgym.cli",),
]


def _modules() -> dict[str, Path]:
    found = {}
    for package in ("envgym", "synth"):
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules `path` imports, at any depth of the file (lazy imports count too)."""
    out = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            # `from pkg import submodule` is about the submodule; `from pkg import name` about the package.
            targets = submodules if len(submodules) == len(node.names) else [*submodules, base]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _layer(module: str) -> int | None:
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


MODULES = _modules()
GRAPH = {name: _imports(path, name, set(MODULES)) - {"envgym"} for name, path in MODULES.items()}


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if m != "envgym" and _layer(m) is None] == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "envgym"))
def test_imports_only_go_down(module: str) -> None:
    own = _layer(module)
    assert own is not None
    upward = sorted(t for t in GRAPH[module] if (_layer(t) or 0) > own)
    assert upward == [], f"{module} (layer {own}) imports from higher layers: {upward}"


def test_no_import_cycles() -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(GRAPH.get(node, ())):
            if state.get(target) == 1:
                cycle = [*path[path.index(target):], target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
