"""`python -m envgym.integrations.openenv serve ENV [--port P]` serves a world through OpenEnv's server;
`... play ENV --url URL --task T [--task T2 ...]` plays oracle episodes with OpenEnv's client (concurrently, one
session each) and prints one JSON line per episode; `--jobs FILE.json` (a list of {"env", "url", "task", "seed",
"env_dir"}) plays episodes on several servers at once; `... tools --url URL` prints the MCP tool listing as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envgym.integrations.openenv")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve one envgym world with OpenEnv's app")
    serve.add_argument("env")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-sessions", type=int, default=8)
    serve.add_argument("--env-dir", default=None, help="a folder of environment folders to register first")
    play = sub.add_parser("play", help="play oracle episodes with OpenEnv's client")
    play.add_argument("env", nargs="?")
    play.add_argument("--url")
    play.add_argument("--task", action="append", default=[])
    play.add_argument("--jobs", default=None, metavar="FILE.json", help="episodes on several servers at once")
    play.add_argument("--seed", type=int, default=0)
    play.add_argument("--env-dir", default=None)
    tools = sub.add_parser("tools", help="list the tools (and make one call) through OpenEnv's MCPToolClient")
    tools.add_argument("--url", required=True)
    tools.add_argument("--call", default=None, metavar="TOOL")
    tools.add_argument("--arguments", default="{}", metavar="JSON")
    args = parser.parse_args(argv)

    if args.command == "serve":
        import uvicorn

        from envgym.integrations.openenv.server import make_app

        uvicorn.run(make_app(args.env, env_dir=args.env_dir, max_sessions=args.max_sessions), host=args.host,
                    port=args.port, log_level="warning")
    elif args.command == "play":
        from envgym.integrations.openenv.client import play_jobs

        if args.jobs:
            with open(args.jobs) as handle:
                jobs = json.load(handle)
        elif args.env and args.url and args.task:
            jobs = [{"env": args.env, "url": args.url, "task": t, "seed": args.seed + i, "env_dir": args.env_dir}
                    for i, t in enumerate(args.task)]
        else:
            parser.error("play needs ENV --url URL --task T, or --jobs FILE.json")
        for row in asyncio.run(play_jobs(jobs)):
            sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
    else:
        from openenv.core.mcp_client import MCPToolClient

        async def listing() -> dict[str, object]:
            async with MCPToolClient(base_url=args.url) as client:
                listed = [t.model_dump() for t in await client.list_tools()]
                called = await client.call_tool(args.call, **json.loads(args.arguments)) if args.call else None
                return {"tools": listed, "result": called}

        sys.stdout.write(json.dumps(asyncio.run(listing()), default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
