"""Serving environments to agents that already speak a protocol: the MCP server (`envgym mcp serve`)."""
