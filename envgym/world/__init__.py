"""The stateful tool world: the file format, the state and tool execution."""

from envgym.world.spec import EntitySpec, TaskSpec, ToolSpec, WorldSpec, load_tasks, load_world
from envgym.world.state import WorldState, generate_state
from envgym.world.tools import ToolError, ToolExecutor, ToolResult

__all__ = [
    "EntitySpec",
    "TaskSpec",
    "ToolError",
    "ToolExecutor",
    "ToolResult",
    "ToolSpec",
    "WorldSpec",
    "WorldState",
    "generate_state",
    "load_tasks",
    "load_world",
]
