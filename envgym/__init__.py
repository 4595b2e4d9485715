"""envgym: Gymnasium environments for training tool-using LLM agents.

Importing envgym registers every bundled environment as `envgym/<name>-v0`.
"""

from envgym.env import ToolWorldEnv
from envgym.registry import register_bundled, register_dir, registered_ids
from envgym.remote import RemoteEnv, RemoteEnvError  # also registers envgym/remote-v0
from envgym.world.tools import ToolError

__version__ = "0.1.0"
__all__ = ["RemoteEnv", "RemoteEnvError", "ToolError", "ToolWorldEnv", "register_dir", "registered_ids"]

register_bundled()
