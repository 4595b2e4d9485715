"""The code environment's tools and hooks: the agent works in a sandbox; hidden tests grade a fresh one.

Each episode holds one sandbox (backend from $ENVGYM_CODE_BACKEND: "local", the default, or "docker" for real
isolation). Grading copies only solution.py into a second, freshly reset sandbox with a runner that knows the hidden
cases' arguments but not their expected values; the comparison happens here, outside every sandbox. Test files,
conftest.py or anything else the agent writes never reach the grading sandbox.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
import random
import threading
import weakref
from pathlib import Path, PurePosixPath
from typing import Any

from envgym.sandbox import Sandbox, SandboxError, SandboxSpec, get_backend
from envgym.sandbox.errors import InvalidRequestError, NotFoundError
from envgym.world import ToolError, WorldState
from envgym.world.spec import TaskSpec

BACKEND_VAR = "ENVGYM_CODE_BACKEND"
SOLUTION_FILE = "solution.py"
VISIBLE_TESTS_FILE = "test_solution.py"
RUN_TIMEOUT_S = 10.0
GRADE_TIMEOUT_S = 20.0  # the runner's own limits stop it after about 5 s
MAX_OUTPUT = 8000  # characters of stdout and of stderr shown to the agent
MAX_FILE_BYTES = 200_000
MAX_IDLE = 4  # started sandboxes kept per backend between episodes
_CODE_DIR = Path(__file__).resolve().parent
_RUNNER = (_CODE_DIR / "grade_runner.py").read_text()
_SANDBOX = "code.sandbox"
_RELEASE = "code.release"
_VISIBLE = "code.visible_tests"
_GRADES = "code.grades"
_log = logging.getLogger(__name__)


class _Shelf:
    """Started sandboxes of one backend kept idle between uses: starting one takes about a second, resetting a used
    one (processes killed, workspace and /tmp emptied) a few milliseconds. No background starts: an empty shelf
    starts a sandbox on demand."""

    def __init__(self, backend: str, spec: SandboxSpec) -> None:
        self.backend = get_backend(backend)
        self.spec = spec
        self._idle: list[Sandbox] = []
        self._lock = threading.Lock()

    def acquire(self) -> Sandbox:
        while True:
            with self._lock:
                box = self._idle.pop() if self._idle else None
            if box is None:
                return self.backend.create(self.spec)
            try:
                box.reset()  # also proves it is still alive (idle sandboxes exit after spec.idle_s)
                return box
            except SandboxError:
                box.close()

    def release(self, box: Sandbox) -> None:
        if box.closed:
            return
        try:
            box.reset()  # stop whatever the user left running now, not at the next acquire
        except SandboxError:
            box.close()
            return
        with self._lock:
            keep = len(self._idle) < MAX_IDLE
            if keep:
                self._idle.append(box)
        if not keep:
            box.close()


_SHELVES: dict[str, _Shelf] = {}
_SHELVES_LOCK = threading.Lock()


def _shelf() -> _Shelf:
    backend = os.environ.get(BACKEND_VAR, "local")
    if backend not in ("local", "docker"):
        raise ValueError(f"${BACKEND_VAR}: expected 'local' or 'docker', got {backend!r}")
    with _SHELVES_LOCK:
        if backend not in _SHELVES:
            _SHELVES[backend] = _Shelf(backend, _sandbox_spec(backend))
        return _SHELVES[backend]


def _sandbox_spec(backend: str) -> SandboxSpec:
    spec = SandboxSpec(memory_mb=512, timeout_s=RUN_TIMEOUT_S, max_output_bytes=MAX_OUTPUT, ttl_s=6 * 3600)
    if backend == "docker":
        spec = spec.model_copy(update={"image": _docker_image()})
    return spec


def _docker_image() -> str:
    """The sandbox image without this environment's folder: the envgym image ships environments/, and with it the
    hidden tests in tasks.jsonl, which the agent must not be able to read."""
    import docker

    from envgym.sandbox.image import ensure_image

    client = docker.from_env()
    base = ensure_image(client, quiet=True)
    tag = f"envgym-sandbox-code:{base.rpartition(':')[2]}"
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        dockerfile = f"FROM {base}\nRUN rm -rf /opt/envgym/src/environments/{_CODE_DIR.name}\n"
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, pull=False, rm=True, forcerm=True)
    return tag


def _sandbox(state: WorldState) -> Sandbox:
    """The episode's sandbox, taken from the shelf on first use. It goes back when the state is closed (on_close)
    or garbage-collected: replaying a reference solution for the target state runs tools without any hooks."""
    box = state.resources.get(_SANDBOX)
    if box is None:
        shelf = _shelf()
        box = shelf.acquire()
        state.resources[_SANDBOX] = box
        state.resources[_RELEASE] = weakref.finalize(state, shelf.release, box)
    return box


# ------------------------------------------------------------------ the agent's tools


def _relative_path(path: str) -> str:
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts or "\x00" in path:
        raise ToolError(f"path: expected a relative path inside the workspace without '..', got {path!r}")
    return str(PurePosixPath(*parts))


def _utf8(text: str, argument: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise ToolError(f"{argument}: not valid UTF-8 text ({exc.reason} at {exc.start})") from None


def _sandbox_failure(tool: str, exc: SandboxError) -> ToolError:
    return ToolError(f"{tool}: the sandbox failed: {exc}")


def _exec_python(state: WorldState, tool: str, argv: list[str], stdin: str | None = None) -> dict[str, Any]:
    try:
        result = _sandbox(state).exec(argv, stdin=stdin, timeout=RUN_TIMEOUT_S, max_output=MAX_OUTPUT)
    except SandboxError as exc:
        raise _sandbox_failure(tool, exc) from None
    return {
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "timed_out": result.timed_out,
        "truncated": result.stdout_truncated or result.stderr_truncated,
    }


def run_python(state: WorldState, code: str) -> dict[str, Any]:
    """Run `code` with python3 in the workspace; returns exit code, stdout and stderr (capped)."""
    _utf8(code, "code")
    return _exec_python(state, "run_python", ["python3", "-"], stdin=code)


def write_file(state: WorldState, path: str, content: str) -> dict[str, Any]:
    data = _utf8(content, "content")
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"content: at most {MAX_FILE_BYTES} bytes, got {len(data)}")
    path = _relative_path(path)
    try:
        _sandbox(state).write_file(path, data)
    except SandboxError as exc:
        raise _sandbox_failure("write_file", exc) from None
    return {"path": path, "bytes": len(data)}


def read_file(state: WorldState, path: str) -> dict[str, Any]:
    path = _relative_path(path)
    try:
        data = _sandbox(state).read_file(path)
    except (NotFoundError, InvalidRequestError) as exc:
        raise ToolError(f"read_file: {exc}") from None
    except SandboxError as exc:
        raise _sandbox_failure("read_file", exc) from None
    text = data[:MAX_FILE_BYTES].decode(errors="replace")
    return {"path": path, "content": text, "truncated": len(data) > MAX_FILE_BYTES}


def run_tests(state: WorldState) -> dict[str, Any]:
    """Run the visible tests, restored to their original text first so that the feedback is honest."""
    source = state.resources.get(_VISIBLE)
    if source is None:
        raise ToolError("run_tests: this episode has no visible tests (the environment was not reset)")
    write_file(state, VISIBLE_TESTS_FILE, source)
    result = _exec_python(state, "run_tests", ["python3", VISIBLE_TESTS_FILE])
    return {"passed": result["exit_code"] == 0 and not result["timed_out"], **result}


# ------------------------------------------------------------------ hooks


def visible_tests_source(task: TaskSpec) -> str:
    """test_solution.py for a task: one test per visible case and a main that runs them without pytest."""
    fn = task.meta["function"]
    tests = "\n\n".join(
        f"def test_{i}():\n    assert {fn}({', '.join(repr(a) for a in case['args'])}) == {case['expected']!r}\n"
        for i, case in enumerate(task.meta["visible_tests"], start=1)
    )
    return (
        f'"""Visible tests for {SOLUTION_FILE}; hidden tests check more cases after the episode."""\n\n'
        f"from solution import {fn}\n\n\n{tests}\n\n"
        'if __name__ == "__main__":\n'
        "    import sys\n\n"
        '    tests = [(name, test) for name, test in sorted(globals().items()) if name.startswith("test_")]\n'
        "    failed = 0\n"
        "    for name, test in tests:\n"
        "        try:\n"
        "            test()\n"
        '            print(f"PASS {name}")\n'
        "        except Exception as exc:\n"
        "            failed += 1\n"
        '            print(f"FAIL {name}: {type(exc).__name__}: {exc}")\n'
        '    print(f"{len(tests) - failed}/{len(tests)} visible tests passed")\n'
        "    sys.exit(1 if failed else 0)\n"
    )


def start_episode(state: WorldState, task: TaskSpec, rng: random.Random) -> None:
    """on_reset: a clean sandbox holding only the visible tests."""
    source = visible_tests_source(task)
    state.resources[_VISIBLE] = source
    _sandbox(state).write_file(VISIBLE_TESTS_FILE, source)


def end_episode(state: WorldState) -> None:
    """on_close: the sandbox goes back to the shelf, reset."""
    release = state.resources.pop(_RELEASE, None)
    state.resources.pop(_SANDBOX, None)
    if release is not None:
        release()


def same_value(actual: Any, expected: Any) -> bool:
    """JSON values equal, with floats compared to 1e-9 and bools never equal to numbers."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(actual, int | float) and isinstance(expected, int | float):
        return math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(actual, list) and isinstance(expected, list):
        return len(actual) == len(expected) and all(map(same_value, actual, expected))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(same_value(actual[k], expected[k]) for k in expected)
    return type(actual) is type(expected) and bool(actual == expected)


def hidden_test_score(solution: bytes, task: TaskSpec) -> float:
    """The fraction of the task's hidden tests `solution` passes, run in a freshly reset sandbox."""
    cases = task.meta["hidden_tests"]
    shelf = _shelf()
    box = shelf.acquire()
    try:
        box.write_file(SOLUTION_FILE, solution)
        box.write_file("grade_runner.py", _RUNNER)
        box.write_file("cases.json", json.dumps({"function": task.meta["function"], "args": [c["args"] for c in cases]}))
        box.exec(["python3", "-I", "-B", "grade_runner.py"], timeout=GRADE_TIMEOUT_S, max_output=1000)
        results = json.loads(box.read_file("results.json"))
    except (SandboxError, ValueError) as exc:
        # The solution can break its grading run (kill the server, hang, write garbage): that scores 0.
        _log.warning("code env: grading %s scored 0: %s", task.id, exc)
        return 0.0
    finally:
        shelf.release(box)
    if not isinstance(results, list) or len(results) != len(cases):
        return 0.0
    passed = sum(
        isinstance(r, dict) and "value" in r and same_value(r["value"], c["expected"])
        for r, c in zip(results, cases, strict=True)
    )
    return passed / len(cases)


def grade(state: WorldState, task: TaskSpec, messages: list[dict[str, Any]]) -> dict[str, float]:
    """grade hook: {"hidden_tests": fraction passed}; 0.0 without a solution.py. Cached per solution text, since the
    env grades after every reply to the user."""
    try:
        solution = _sandbox(state).read_file(SOLUTION_FILE)
    except SandboxError:
        return {"hidden_tests": 0.0}
    key = f"{task.id}:{hashlib.sha256(solution).hexdigest()}"
    grades: dict[str, float] = state.resources.setdefault(_GRADES, {})
    if key not in grades:
        grades[key] = hidden_test_score(solution, task)
    return {"hidden_tests": grades[key]}
