"""envgym worlds as OpenEnv environments, served by OpenEnv's own server (`openenv.core`'s `Environment` base and
`create_app`) and played with OpenEnv's own clients (`EnvClient`, `MCPToolClient`).

    python -m envgym.integrations.openenv serve retail --port 8000 [--env-dir FOLDER] [--max-sessions 8]

`models` holds the typed action, observation and state; `server` the `Environment` and the app; `client` the typed
`EnvClient` and an oracle player (what the tests and `play` use). OpenEnv pins mcp and fastmcp against envgym's
own pins, so this package is used from the venv `scripts/install.sh --dev` makes (~/.cache/envgym/openenv); nothing
else in envgym imports it.
"""
