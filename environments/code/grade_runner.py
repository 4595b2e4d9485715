"""Runs inside a fresh grading sandbox: calls the solution's function on every hidden case's arguments.

It writes one JSON object per case to results.json: {"value": <JSON result>} or {"error": <exception type>}. The
expected values never enter the sandbox; the grader compares outside it, so nothing the solution does in this process
can learn or forge them. Usage: python3 -I grade_runner.py (reads cases.json: {"function", "args"}).
"""

import copy
import json
import os
import signal
import sys
import time
from types import FrameType
from typing import Any

IMPORT_TIMEOUT_S = 2.0
CASE_TIMEOUT_S = 0.5
TOTAL_TIMEOUT_S = 3.0  # once spent, the remaining cases fail without running (an endless loop costs 3 s, not 6)


def _too_slow(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError("the case ran out of time")


def _call(fn: Any, args: list[Any], deadline: float) -> dict[str, Any]:
    budget = min(CASE_TIMEOUT_S, deadline - time.monotonic())
    if budget <= 0:
        return {"error": "TimeoutError"}
    signal.setitimer(signal.ITIMER_REAL, budget)
    try:
        return {"value": json.loads(json.dumps(fn(*copy.deepcopy(args))))}
    except BaseException as exc:  # a failing case, whatever it raised (SystemExit included), fails alone
        return {"error": type(exc).__name__}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> None:
    workspace = os.getcwd()  # the solution may chdir at import; results still land here
    with open("cases.json") as fh:
        cases = json.load(fh)
    signal.signal(signal.SIGALRM, _too_slow)
    sys.path.insert(0, workspace)  # -I leaves the script's folder off sys.path
    signal.setitimer(signal.ITIMER_REAL, IMPORT_TIMEOUT_S)
    try:
        import solution

        fn = getattr(solution, cases["function"])
    except BaseException as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        results: list[dict[str, Any]] = [{"error": f"import: {type(exc).__name__}"}] * len(cases["args"])
    else:
        signal.setitimer(signal.ITIMER_REAL, 0)
        deadline = time.monotonic() + TOTAL_TIMEOUT_S
        results = [_call(fn, args, deadline) for args in cases["args"]]
    with open(os.path.join(workspace, "results.json"), "w") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
