"""A small stdio MCP server over one sqlite database (`notes_server.py DB_PATH`), for the tests of live MCP tools.

Run by the tests as a real subprocess through the official SDK: `add_note` writes a row, `list_notes` reads them, and
`show_env` returns an environment variable (to check that `--env KEY=VALUE` reaches the server).
"""

from __future__ import annotations

import os
import sqlite3
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")
DB = sys.argv[1] if len(sys.argv) > 1 else ":memory:"


def _db() -> sqlite3.Connection:
    conn = sqlite3.connect(DB)
    conn.execute("CREATE TABLE IF NOT EXISTS notes (text TEXT NOT NULL)")
    return conn


@server.tool()
def add_note(text: str) -> str:
    """Add a note."""
    with _db() as conn:
        conn.execute("INSERT INTO notes (text) VALUES (?)", (text,))
    return f"added {text!r}"


@server.tool()
def list_notes() -> list[str]:
    """Every note, oldest first."""
    with _db() as conn:
        return [row[0] for row in conn.execute("SELECT text FROM notes ORDER BY rowid")]


@server.tool()
def show_env(name: str) -> str:
    """The value of one environment variable of this server ('' if unset)."""
    return os.environ.get(name, "")


if __name__ == "__main__":
    server.run("stdio")
