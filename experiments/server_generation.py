"""One GRPO group's rollouts through an inference server, next to the same group sampled in-process, same run.

Starts `transformers serve` on loopback (no pinned model), pushes the policy to it (full weights through
`/load_model`, as the trainer does after each update) and runs the same calculator group (G episodes, one turn)
with `generation: server` and with the in-process `CachedSampler`. Prints the push time, both rollout times, their
ratio and the fraction of turns the text-only server could not verify. `transformers serve` answers one request at
a time with no batching, so this measures the wiring and the cost of a push, not a scale engine; vLLM and SGLang
cannot run on this CPU-only machine.
Run: python experiments/server_generation.py [--model local|tiny-random] [--group 8] [--new-tokens 32] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
from rich.console import Console

from envgym.train.generation import CachedSampler
from envgym.train.policy import load_policy
from envgym.train.rollout import RolloutLimits, run_group
from envgym.train.server_sampler import TransformersServeSampler
from envgym.train.trainer import make_env


def start_server(console: Console) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "transformers.cli.transformers", "serve", "--host",
                                "127.0.0.1", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    with console.status("starting transformers serve"):
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"transformers serve exited with {process.returncode}")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    return process, url
            except httpx.TransportError:
                pass
            time.sleep(1)
    process.terminate()
    raise SystemExit("transformers serve was not ready after 600 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="local", help="GRPOConfig.model: 'local' (SmolLM2-135M) or 'tiny-random'")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    console = Console(stderr=True)
    model, tokenizer = load_policy(args.model, seed=0)
    envs = [make_env("envgym/calculator-v0") for _ in range(args.group)]
    task = envs[0].unwrapped.data.tasks[0].id
    limits = RolloutLimits(max_new_tokens=args.new_tokens, max_sequence_tokens=2048, max_turns=1)
    process, url = start_server(console)
    try:
        with tempfile.TemporaryDirectory() as push_dir:
            sampler = TransformersServeSampler(url, tokenizer, push_dir=push_dir)
            with console.status("pushing the policy"):
                started = time.perf_counter()
                sampler.push_weights(model, 0)
                push_s = time.perf_counter() - started
            timings: dict[str, float] = {}
            for round_index in range(args.rounds):  # interleaved, best of each: load only slows things down
                for name, backend in (("in-process", CachedSampler(model, tokenizer)), ("server", sampler)):
                    with console.status(f"round {round_index + 1}/{args.rounds}, {name}: {args.group} episodes"):
                        started = time.perf_counter()
                        run_group(envs, [task] * args.group, backend, limits, temperature=1.0, seed=round_index)
                        elapsed = time.perf_counter() - started
                    timings[name] = min(timings.get(name, elapsed), elapsed)
    finally:
        process.terminate()
        process.wait(timeout=60)
    load = os.getloadavg()[0]
    print(f"model {args.model}, G={args.group}, one turn of up to {args.new_tokens} tokens, best of {args.rounds} "
          f"interleaved rounds, load {load:.1f}")
    print(f"push (save + /load_model): {push_s:.2f} s")
    print(f"rollout in-process: {timings['in-process']:.2f} s   server: {timings['server']:.2f} s   "
          f"ratio server/in-process: {timings['server'] / timings['in-process']:.2f}")
    print(f"unverified turns (kept as context, not trained): {sampler.stats['unverified']}/{sampler.stats['requests']}")


if __name__ == "__main__":
    main()
