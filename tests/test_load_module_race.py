"""`load_module` from many threads at once: every caller gets the module whole, and it runs once.

The module under test sleeps while it loads, which holds open the window a real first import has for a few
milliseconds: on the old code every thread that arrived in it got the half-run module (no functions yet).
"""

from __future__ import annotations

import threading
from pathlib import Path

from envgym.world.folder import load_module, resolve_python

THREADS = 16

SLOW_MODULE = """
import time
from pathlib import Path

Path(__file__).with_name("runs.log").open("a").write("ran\\n")
time.sleep(0.3)


def place_order(state, item):
    return {"ordered": item}
"""


def _slow_folder(tmp_path: Path) -> Path:
    (tmp_path / "tools.py").write_text(SLOW_MODULE)
    return tmp_path


def test_threads_importing_a_folder_module_at_once_all_get_it_whole_and_it_runs_once(tmp_path: Path) -> None:
    folder = _slow_folder(tmp_path)
    start = threading.Barrier(THREADS)
    results: list[object] = []
    errors: list[BaseException] = []

    def first_use() -> None:
        start.wait()
        try:
            results.append(resolve_python(folder, "tools:place_order")(None, item="mug"))
        except BaseException as exc:  # every thread's failure is reported
            errors.append(exc)

    threads = [threading.Thread(target=first_use) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert results == [{"ordered": "mug"}] * THREADS
    assert (folder / "runs.log").read_text() == "ran\n"


def test_a_module_that_fails_to_load_is_not_left_half_loaded_and_loads_once_fixed(tmp_path: Path) -> None:
    folder = tmp_path
    (folder / "tools.py").write_text("raise RuntimeError('broken on purpose')\n")
    errors: list[BaseException] = []

    def first_use() -> None:
        try:
            load_module(folder, "tools")
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(errors) == 4 and all("broken on purpose" in str(e) for e in errors)
    (folder / "tools.py").write_text("def place_order(state, item):\n    return item\n")
    assert load_module(folder, "tools").place_order(None, "cup") == "cup"
