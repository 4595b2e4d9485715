"""envgym: Gymnasium environments for training tool-using LLM agents.

Importing envgym registers every bundled environment as `envgym/<name>-v0`.
"""

from typing import TYPE_CHECKING, Any

from envgym.env import ToolWorldEnv
from envgym.registry import register_bundled, register_dir, register_remote, registered_ids
from envgym.world.tools import ToolError

if TYPE_CHECKING:
    from envgym.remote import RemoteEnv, RemoteEnvError

__version__ = "0.1.0"
__all__ = ["RemoteEnv", "RemoteEnvError", "ToolError", "ToolWorldEnv", "register_dir", "registered_ids"]


def __getattr__(name: str) -> Any:
    # The remote client (asyncio, sockets, TLS) is imported when it is first asked for: an in-process env never
    # uses it, and every module imported stays on the heap that each full collection of the cycle collector walks.
    if name in ("RemoteEnv", "RemoteEnvError"):
        from envgym import remote

        return getattr(remote, name)
    raise AttributeError(f"module 'envgym' has no attribute {name!r}")


register_bundled()
register_remote()
