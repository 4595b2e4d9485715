"""What a folder's `generate.py` receives: the loaded world, its seeded initial state and its tool runner.

A Protocol, so generators depend on `envgym.world` alone while the loader (a layer above) builds the real thing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from envgym.world.spec import WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolExecutor


class LoadedEnvironment(Protocol):
    @property
    def world(self) -> WorldSpec: ...
    @property
    def initial(self) -> WorldState: ...
    @property
    def executor(self) -> ToolExecutor: ...
    @property
    def directory(self) -> Path | None: ...
