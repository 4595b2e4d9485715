"""Sweeping leaked sandboxes across backends: expired, orphaned (owner process gone), or of one run."""

from __future__ import annotations

from envgym.sandbox import get_backend


def reap(
    backends: tuple[str, ...] = ("local", "docker"), *, run_id: str | None = None, orphans: bool = True
) -> dict[str, list[str] | str]:
    """Run every backend's reaper; returns the sandbox ids removed per backend, or why it was skipped."""
    report: dict[str, list[str] | str] = {}
    for name in backends:
        try:
            backend = get_backend(name)
        except Exception as exc:
            report[name] = f"skipped: {type(exc).__name__}: {exc}"
            continue
        report[name] = backend.reap(run_id=run_id, orphans=orphans)
    return report
