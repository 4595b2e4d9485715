"""Proof that a pid is still the process we spawned: the pid with its kernel start time, taken at spawn.

A pid alone is reused, and a command line can be chosen by anyone, so the reaper kills only a process whose start
time (field 22 of /proc/<pid>/stat, in clock ticks since boot) is the one recorded when it was spawned, that runs
as this user and that still leads the session it was started in (`start_new_session=True`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class SpawnRecord:
    """What the spawner writes down about a process it started."""

    pid: int
    start_ticks: int

    def to_json(self) -> dict[str, int]:
        return {"server_pid": self.pid, "server_start_ticks": self.start_ticks}


@dataclass(frozen=True)
class _Stat:
    session: int
    start_ticks: int
    uid: int


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields resume after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    # fields[0] is field 3 (state); session is field 6, starttime field 22.
    if fields[0] == b"Z":
        return None
    return _Stat(session=int(fields[3]), start_ticks=int(fields[19]), uid=uid)


def record_spawn(pid: int) -> SpawnRecord:
    """The record of a process just started by this one (raises if it has already vanished)."""
    found = _stat(pid)
    if found is None:
        raise ProcessLookupError(f"process {pid} exited before it could be recorded")
    return SpawnRecord(pid, found.start_ticks)


def still_ours(record: SpawnRecord) -> bool:
    """True only while `record.pid` is the very process recorded: same start time, this user, its own session."""
    if record.pid <= 1:
        return False
    found = _stat(record.pid)
    return (
        found is not None
        and found.start_ticks == record.start_ticks
        and found.uid == os.getuid()
        and found.session == record.pid
    )
