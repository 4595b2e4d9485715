"""Commands of the real MCP servers the MCP tests start (installed by scripts/install.sh --dev and scripts/test.sh).

mcp-server-sqlite and todo-txt-mcp are written against the v1 SDK (`mcp<2`), so they live in a venv of their own
(`~/.cache/envgym/mcp-v1`, or `$ENVGYM_MCP_V1_VENV`).
"""

from __future__ import annotations

import os
from pathlib import Path

V1_VENV = Path(os.environ.get("ENVGYM_MCP_V1_VENV", Path.home() / ".cache" / "envgym" / "mcp-v1"))
EVERYTHING = "mcp-server-everything stdio"
MEMORY = "mcp-server-memory"
SQLITE = f"{V1_VENV / 'bin' / 'mcp-server-sqlite'} --db-path {{state}}/db.sqlite"
TODO = f"{V1_VENV / 'bin' / 'todo-txt-mcp'} {{state}}/todo.txt"
