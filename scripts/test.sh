#!/usr/bin/env bash
# Everything the test suite needs, from a fresh machine: Python deps, Docker engine + the sandbox image, the real
# MCP servers; then lint, type-check and run every test (slow, model, docker and mcp ones included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
for server in filesystem memory everything; do
  if ! command -v "mcp-server-$server" >/dev/null 2>&1; then
    npm install -g --silent "@modelcontextprotocol/server-$server"
  fi
done
bash scripts/ci_docker.sh
# tests/view/test_viewer.py renders envgym view's page in headless Chromium (Debian's package).
if ! command -v chromium >/dev/null 2>&1; then
  apt_get() { if [[ $(id -u) == 0 ]]; then apt-get "$@"; else sudo apt-get "$@"; fi; }
  apt_get update -q && apt_get install -y -q chromium
fi
ruff check .
mypy
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pytest -q -p no:cacheprovider --durations=40 "$@"
