"""The stateful tool world: the file format, the state and tool execution."""

from envgym.world.files import load_tasks, load_world
from envgym.world.folder import REQUIRED_FILES, load_module, resolve_python
from envgym.world.loaded import LoadedEnvironment
from envgym.world.spec import (
    Answer,
    Assertion,
    EntitySpec,
    SpecError,
    TaskSpec,
    ToolCall,
    ToolSpec,
    WorldSpec,
)
from envgym.world.state import WorldState, generate_state, next_key
from envgym.world.tools import ToolError, ToolExecutor, ToolResult
from envgym.world.values import infer_answer

__all__ = [
    "REQUIRED_FILES",
    "Answer",
    "Assertion",
    "EntitySpec",
    "LoadedEnvironment",
    "SpecError",
    "TaskSpec",
    "ToolCall",
    "ToolError",
    "ToolExecutor",
    "ToolResult",
    "ToolSpec",
    "WorldSpec",
    "WorldState",
    "generate_state",
    "infer_answer",
    "load_module",
    "load_tasks",
    "load_world",
    "next_key",
    "resolve_python",
]
