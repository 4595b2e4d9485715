#!/usr/bin/env bash
# Everything the test suite needs, from a fresh machine: Python deps, Docker engine + the sandbox image, the real
# MCP servers; then lint, type-check and run every test (slow, model, docker and mcp ones included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
if ! command -v mcp-server-filesystem >/dev/null 2>&1; then
  npm install -g --silent @modelcontextprotocol/server-filesystem
fi
bash scripts/ci_docker.sh
ruff check .
mypy
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pytest -q -p no:cacheprovider --durations=40 "$@"
