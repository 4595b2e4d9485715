"""`envgym mcp serve ENV`: an environment as an MCP server, over stdio (default) or streamable HTTP.

Over HTTP the agent's endpoint `/mcp` wants the bearer token of `--token-file` (or a fresh one whose file is
printed; `--no-auth` on loopback only), and the operator's `/admin` routes want a separate admin token. Rewards
go to the operator only: the `--report` JSONL file and `GET /admin/episodes`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import anyio
import gymnasium as gym

from envgym.cli.common import CliError, add_json_flag, print_json
from envgym.cli.serve import is_loopback, resolve_env_id
from envgym.sandbox.tokens import TokenFileError, read_token_file, write_new_token
from envgym.serve.mcp_episodes import SESSION_IDLE_TIMEOUT_S, EpisodeBook, McpSetupError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = subparsers.add_parser("mcp", help="environments as MCP servers")
    actions = mcp.add_subparsers(dest="mcp_command", required=True, metavar="ACTION")
    p = actions.add_parser("serve", help="serve an environment to MCP clients (one world per MCP session)")
    p.add_argument("env", help="environment name (retail) or gymnasium id (envgym/retail-v0)")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--task", default=None, help="every session plays this task (default: drawn by seed)")
    p.add_argument("--seed", type=int, default=0, help="the first session's seed; each new session takes the next")
    p.add_argument("--report", default=None, help="append each finished episode's reward record to this JSONL file")
    p.add_argument("--host", default="127.0.0.1", help="http: address to listen on")
    p.add_argument("--port", type=int, default=8200, help="http: port (0 picks a free one)")
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--token-file", default=None, help="http: file (mode 0600) with the agent's bearer token")
    auth.add_argument("--no-auth", action="store_true", help="http: accept agents without a token (loopback only)")
    p.add_argument("--session-idle-timeout", type=float, default=SESSION_IDLE_TIMEOUT_S, metavar="SECONDS",
                   help="http: end a session (and drop its world) after this long without a request")
    p.add_argument("--admin-token-file", default=None, help="http: file (mode 0600) with the operator's token")
    add_json_flag(p)  # http: one object once it listens: {"env", "url", "token_file", "admin_token_file"}
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    env_id = resolve_env_id(args.env)
    gym.spec(env_id)
    if not 0 < args.session_idle_timeout < float("inf"):
        raise CliError(f"--session-idle-timeout must be a positive number of seconds, not {args.session_idle_timeout}")
    if args.no_auth and not is_loopback(args.host):
        raise CliError(f"--no-auth is refused on {args.host}: it is not a loopback address")
    try:
        book = EpisodeBook(env_id, task=args.task, seed=args.seed, report=args.report)
    except (McpSetupError, KeyError) as exc:
        raise CliError(str(exc.args[0] if isinstance(exc, KeyError) else exc)) from None
    try:
        if args.transport == "stdio":
            from envgym.serve.mcp_server import serve_stdio

            anyio.run(serve_stdio, book)
            return 0
        return _serve_http(args, env_id, book)
    finally:
        book.close()


def _serve_http(args: argparse.Namespace, env_id: str, book: EpisodeBook) -> int:
    from envgym.serve.mcp_http import MCP_PATH, build_http_app, listen, serve_http

    with tempfile.TemporaryDirectory(prefix="envgym-mcp-") as private:
        try:
            token_file = None if args.no_auth else (args.token_file or write_new_token(private))
            agent_token = read_token_file(token_file) if token_file else None
            admin_file = args.admin_token_file or write_new_token(tempfile.mkdtemp(dir=private))
            admin_token = read_token_file(admin_file)
        except TokenFileError as exc:
            raise CliError(str(exc)) from None
        if agent_token == admin_token:
            raise CliError("--admin-token-file holds the agent's token: the operator's token must differ")
        app = build_http_app(book, host=args.host, agent_token=agent_token, admin_token=admin_token,
                             session_idle_timeout=args.session_idle_timeout)
        try:
            sock = listen(args.host, args.port)
        except OSError as exc:
            raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
        url = f"http://{args.host}:{sock.getsockname()[1]}{MCP_PATH}"
        print(f"envgym mcp serve: {env_id} on {url} (token file: {token_file or 'none'}, admin token file: "
              f"{admin_file})", file=sys.stderr, flush=True)
        if args.json:
            print_json({"env": env_id, "url": url, "token_file": token_file, "admin_token_file": admin_file})
        anyio.run(serve_http, app, sock)
    return 0
