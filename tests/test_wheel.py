"""The built wheel works on its own: installed into a fresh venv outside the checkout, `envgym` lists the bundled
suite, renders the shipped Kubernetes manifests and plays an oracle episode (environments/ and k8s/ ship inside)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_NOT_SOURCES = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "runs", "__pycache__", ".venv",
                                      ".*_cache", ".hypothesis")


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_wheel_runs_from_a_fresh_venv_outside_the_checkout(tmp_path: Path) -> None:
    # Built from a copy so the checkout gains no build/ or egg-info, and nothing but the wheel can be imported.
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCES)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ENVGYM_ENV_DIRS", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
          str(source)], tmp_path, env)
    (wheel,) = (tmp_path / "dist").glob("envgym-*.whl")
    venv = tmp_path / "venv"
    # No pip of its own (seeding one costs seconds): this interpreter's pip installs into it through --python.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    # Only the base dependencies the wheel declares (no torch), pinned like the project's CI. Not byte-compiled
    # ahead (thousands of files, most never imported here): Python compiles what the commands below import.
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-compile",
          "--disable-pip-version-check", "-c", str(REPO / "constraints.txt"), str(wheel)], tmp_path, env)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    imported = _run([str(venv / "bin" / "python"), "-c", "import envgym; print(envgym.__file__)"], elsewhere, env)
    assert Path(imported.strip()).is_relative_to(venv)

    envgym = str(venv / "bin" / "envgym")
    listed = json.loads(_run([envgym, "list", "--json"], elsewhere, env))
    assert {"envgym/calculator-v0", "envgym/retail-v0"} <= {e["id"] for e in listed["environments"]}
    assert all(Path(d).is_relative_to(venv) for d in _bundled_dirs(venv, elsewhere, env))

    rendered = json.loads(_run([envgym, "k8s", "render", "dev", "--json"], elsewhere, env))
    assert Path(rendered["directory"]).is_relative_to(venv)
    assert {"Namespace", "Deployment", "Job"} <= {d["kind"] for d in rendered["documents"]}

    summary = json.loads(_run([envgym, "run", "calculator", "--policy", "oracle", "--episodes", "1", "--json"],
                              elsewhere, env))
    assert summary["episodes"] == 1 and summary["success_rate"] == 1.0


def _bundled_dirs(venv: Path, cwd: Path, env: dict[str, str]) -> list[str]:
    script = "import json, envgym.registry as r; print(json.dumps([str(p) for p in r.env_dirs(r.bundled_dir())]))"
    return list(json.loads(_run([str(venv / "bin" / "python"), "-c", script], cwd, env)))
