"""Environment folders: every bundled one has the same shape, and the code a world names stays inside its folder.

A folder is code, like a Python package (its tools.py runs); these tests pin what that code may be: only `.py`
files inside the folder, imported per folder (never shared by name), and never run just to list or show it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from envgym.cli import main
from envgym.loader import load_environment
from envgym.registry import bundled_dir, env_dirs
from envgym.world import REQUIRED_FILES, SpecError
from envgym.world.state import WorldState

BUNDLED = env_dirs(bundled_dir())


@pytest.mark.parametrize("folder", BUNDLED, ids=lambda p: p.name)
def test_every_bundled_folder_has_the_same_shape(folder: Path) -> None:
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    assert missing == []
    for name in ("policy.md", "README.md"):
        assert len((folder / name).read_text().split()) >= 20, f"{folder.name}/{name} says too little"
    readme = (folder / "README.md").read_text().lower()
    assert "tools" in readme and "task" in readme and "grad" in readme  # what it is, its tools, tasks, grading


@pytest.mark.parametrize("folder", [p for p in BUNDLED if (p / "generate.py").exists()], ids=lambda p: p.name)
def test_generators_use_only_the_public_world_api(folder: Path) -> None:
    tree = ast.parse((folder / "generate.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.split(".")[0] == "envgym"} <= {"envgym.world"}


TOOL = "  - name: hello\n    description: d\n    python: {ref}\n"


def _folder(root: Path, name: str, ref: str = "tools:hello", tools_py: str | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "world.yaml").write_text(f"name: {name}\ntools:\n" + TOOL.format(ref=ref))
    if tools_py is not None:
        (folder / "tools.py").write_text(tools_py)
    return folder


@pytest.mark.parametrize(
    "ref",
    ["os:system", "os.path:join", "subprocess:run", "../evil:hello", "{root}/evil:hello", "sub.tools:hello"],
)
def test_a_python_tool_must_be_a_file_in_its_folder(ref: str, tmp_path: Path) -> None:
    (tmp_path / "evil.py").write_text("def hello(state):\n    return 'escaped'\n")
    ref = ref.format(root=tmp_path)
    folder = _folder(tmp_path, "shop", ref=ref)
    (folder / "sub").mkdir()
    (folder / "sub" / "tools.py").write_text("def hello(state):\n    return 'nested'\n")
    with pytest.raises(SpecError) as err:
        load_environment(str(folder))
    assert ref.partition(":")[0] in str(err.value)


def test_a_module_symlinked_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "evil.py").write_text("def hello(state):\n    return 'escaped'\n")
    folder = _folder(tmp_path, "shop")
    (folder / "tools.py").symlink_to(tmp_path / "evil.py")
    with pytest.raises(SpecError, match="inside the environment folder"):
        load_environment(str(folder))


def test_folders_with_the_same_name_do_not_share_tools(tmp_path: Path) -> None:
    first = _folder(tmp_path / "a", "shop", tools_py="def hello(state):\n    return 'from a'\n")
    second = _folder(tmp_path / "b", "shop", tools_py="def hello(state):\n    return 'from b'\n")
    said = [load_environment(str(f)).executor.execute(WorldState({}), "hello", {}).value for f in (first, second)]
    assert said == ["from a", "from b"]


@pytest.mark.usefixtures("registry_restored")
def test_listing_and_showing_a_folder_runs_none_of_its_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "tools-ran"
    code = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n\ndef hello(state):\n    return 1\n"
    _folder(tmp_path / "suite", "untrusted", tools_py=code)
    assert main(["list", "--env-dir", str(tmp_path / "suite"), "--json"]) == 0
    listed = {e["id"]: e for e in json.loads(capsys.readouterr().out)["environments"]}
    assert listed["envgym/untrusted-v0"]["tools"] == 1
    assert main(["show", "untrusted", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tools"][0]["name"] == "hello"
    assert not marker.exists()
    load_environment(str(tmp_path / "suite" / "untrusted"))  # making it does run the code: the check can fail
    assert marker.exists()
