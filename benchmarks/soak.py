"""Soak: valid and hostile clients together against `envgym serve --workers 2`, for minutes (issue 41).

    python benchmarks/soak.py [--minutes 10] [--clients 64] [--hostile 16] [--out docs/results/soak.md]

First a baseline: the valid clients alone for `--baseline-s`. Then the soak: the same valid clients (RemoteEnv
episodes on calculator, a think time between steps, as an agent has) beside hostile clients, each looping one attack
of the last two hardening rounds: slowloris heads, dribbled bodies, oversized and wrong-token requests, bad request
targets, huge actions, steps past the episode budget, sessions opened and abandoned, idle connection floods. The
server's RSS (front and workers together) is sampled every few seconds. Prints one JSON object; writes a Markdown
report. Acceptance (issue 41): RSS flat within 10% after warm-up, valid-client p99 within 3x of the baseline.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Run as a script (`python benchmarks/soak.py`), the repository root must be on the path for `benchmarks.serving`
# (and for the hostile process, which is spawned and imports this file again).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks.serving import REPO_ROOT, Server, rss_mb, start_server

ACTION = "Let me think about it."
THINK_S = 0.1  # an agent's pause between steps (its model's turn)
HOSTILE_PAUSE_S = 0.01  # between one hostile client's attacks: each sends at most ~100 a second


@dataclass
class Tally:
    """What the clients saw, shared by every thread (appends and counter updates under the GIL)."""

    latencies: list[float] = field(default_factory=list)
    valid_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    hostile: collections.Counter[str] = field(default_factory=collections.Counter)


def _status(data: bytes) -> str:
    """The status code of the first response in `data`, or what happened instead."""
    if not data:
        return "closed"
    parts = data.split(b" ", 2)
    return parts[1].decode("ascii", "replace") if len(parts) > 1 and data.startswith(b"HTTP/1.1") else "garbage"


class Attacks:
    """One method per attack; each runs once and returns the outcome to tally (a status code or what happened)."""

    def __init__(self, url: str, token: str) -> None:
        split = urlsplit(url)
        self.address = (split.hostname or "127.0.0.1", split.port or 80)
        self.url, self.token = url, token

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=30)
        sock.settimeout(30)
        return sock

    def _exchange(self, payload: bytes, pause_s: float = 0.0, chunks: int = 1) -> str:
        with contextlib.closing(self._connect()) as sock:
            try:
                step = max(1, len(payload) // chunks)
                for i in range(0, len(payload), step):
                    sock.sendall(payload[i : i + step])
                    if pause_s:
                        time.sleep(pause_s)
                return _status(sock.recv(4096))
            except (BrokenPipeError, ConnectionResetError):
                return "closed-by-server"
            except OSError as exc:
                return type(exc).__name__

    def slowloris(self) -> str:
        head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-a: " + b"a" * 200
        return "slowloris:" + self._exchange(head, pause_s=1.0, chunks=20)

    def dribble(self) -> str:
        head = f"POST /v1/env/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.token}\r\n"
        head += "Content-Length: 4096\r\n\r\n"
        return "dribble:" + self._exchange(head.encode() + b"x" * 200, pause_s=0.5, chunks=200)

    def oversized(self) -> str:
        head = f"POST /v1/env/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.token}\r\n"
        return "oversized:" + self._exchange((head + "Content-Length: 104857600\r\n\r\n").encode() + b"x" * 65536)

    def wrong_token(self) -> str:
        head = "GET /v1/env/sessions/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer éé\r\n\r\n"
        return "wrong-token:" + self._exchange(head.encode())

    def bad_target(self) -> str:
        return "bad-target:" + self._exchange(b"GET //evil/v1/he\talth HTTP/1.1\r\nHost: x\r\n\r\n")

    def idle_flood(self) -> str:
        socks = []
        try:
            for _ in range(50):
                socks.append(self._connect())
            time.sleep(2.0)
            return "idle-flood:held"
        except OSError as exc:
            return f"idle-flood:{type(exc).__name__}"
        finally:
            for sock in socks:
                sock.close()

    def _env(self) -> Any:
        from envgym.remote import RemoteEnv

        return RemoteEnv(self.url, token=self.token)

    def huge_actions(self) -> str:
        env = self._env()
        try:
            env.reset(seed=0)
            for _ in range(60):
                env.step("x" * (1 << 20))
            return "huge-actions:accepted"
        except Exception as exc:
            return f"huge-actions:{_error_kind(exc)}"
        finally:
            env.close()

    def step_flood(self) -> str:
        env = self._env()
        try:
            env.reset(seed=0)
            for _ in range(1100):
                _, _, terminated, truncated, _ = env.step(ACTION)
                if terminated or truncated:
                    return "step-flood:episode-ended"
            return "step-flood:accepted"
        except Exception as exc:
            return f"step-flood:{_error_kind(exc)}"
        finally:
            env.close()

    def abandoned_sessions(self) -> str:
        from envgym.remote import RemoteEnv

        try:
            for _ in range(20):
                RemoteEnv(self.url, token=self.token).reset(seed=0)  # never closed: the idle reaper's work
            return "abandoned-sessions:opened"
        except Exception as exc:
            return f"abandoned-sessions:{_error_kind(exc)}"

    def all(self) -> list[Callable[[], str]]:
        return [self.slowloris, self.dribble, self.oversized, self.wrong_token, self.bad_target, self.idle_flood,
                self.huge_actions, self.step_flood, self.abandoned_sessions]


def _error_kind(exc: BaseException) -> str:
    """The typed error's name where the server sent one (`RemoteEnvError: ...: BudgetExceededError: ...`)."""
    text = str(exc)
    for name in ("BudgetExceededError", "EnvHostError", "PayloadTooLargeError", "SandboxUnavailableError",
                 "RequestTimeoutError", "NotFoundError", "AuthError", "InvalidRequestError"):
        if name in text:
            return name
    return type(exc).__name__


def valid_client(url: str, token: str, seed: int, stop: threading.Event, tally: Tally) -> None:
    """Episodes of calculator, a think time between steps; every step's latency is kept, every error counted."""
    from envgym.remote import RemoteEnv

    while not stop.is_set():
        try:
            env = RemoteEnv(url, token=token)
        except Exception as exc:
            tally.valid_errors[_error_kind(exc)] += 1
            time.sleep(1.0)
            continue
        try:
            env.reset(seed=seed)
            for _ in range(20):
                if stop.is_set():
                    break
                time.sleep(THINK_S)
                started = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(ACTION)
                tally.latencies.append(time.perf_counter() - started)
                if terminated or truncated:
                    env.reset(seed=seed)
        except Exception as exc:
            tally.valid_errors[_error_kind(exc)] += 1
        finally:
            with contextlib.suppress(Exception):
                env.close()


def hostile_client(attack: Callable[[], str], stop: threading.Event, tally: Tally) -> None:
    while not stop.is_set():
        try:
            tally.hostile[attack()] += 1
        except Exception as exc:
            tally.hostile[f"{attack.__name__}:{type(exc).__name__}"] += 1
        time.sleep(HOSTILE_PAUSE_S)


def hostile_process(url: str, token: str, hostile: int, stop: Any, out: Any, names: tuple[str, ...] = (),
                    nice: int = 0) -> None:
    """The hostile clients, in a process of their own: their threads must not take the valid clients' GIL (which
    would count client-side waits as server latency). `names` picks attacks (all when empty); `nice` lowers the
    process's CPU priority."""
    if nice:
        os.nice(nice)
    tally, stop_threads = Tally(), threading.Event()
    attacks = [a for a in Attacks(url, token).all() if not names or a.__name__ in names]
    threads = [threading.Thread(target=hostile_client, args=(attacks[i % len(attacks)], stop_threads, tally),
                                daemon=True) for i in range(hostile)]
    for thread in threads:
        thread.start()
    stop.wait()
    stop_threads.set()
    for thread in threads:
        thread.join(60)
    out.put(dict(tally.hostile))


def server_rss_mb(server: Server) -> float:
    pids = {server.proc.pid, *server.worker_pids()}
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += rss_mb(pid)
    return round(total, 1)


def p99_ms(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1) if ordered else float("nan")


def run_phase(server: Server, token: str, valid: int, hostile: int, seconds: float, sample_s: float,
              progress: Progress, label: str, attacks: tuple[str, ...] = (), nice: int = 0) -> dict[str, Any]:
    import multiprocessing

    tally, stop = Tally(), threading.Event()
    threads = [threading.Thread(target=valid_client, args=(server.url, token, i, stop, tally), daemon=True)
               for i in range(valid)]
    context = multiprocessing.get_context("spawn")
    stop_hostile, hostile_out = context.Event(), context.Queue()
    attacker = context.Process(target=hostile_process, args=(server.url, token, hostile, stop_hostile, hostile_out,
                                                                  attacks, nice))
    if hostile:
        attacker.start()
    for thread in threads:
        thread.start()
    task = progress.add_task(label, total=seconds)
    started = time.monotonic()
    rss: list[tuple[float, float]] = []
    while (elapsed := time.monotonic() - started) < seconds:
        rss.append((round(elapsed, 1), server_rss_mb(server)))
        progress.update(task, completed=elapsed)
        time.sleep(min(sample_s, max(0.0, seconds - elapsed)))
    stop.set()
    stop_hostile.set()
    for thread in threads:
        thread.join(60)
    if hostile:
        tally.hostile.update(hostile_out.get(timeout=120))
        attacker.join(60)
    progress.update(task, completed=seconds)
    rss.append((round(time.monotonic() - started, 1), server_rss_mb(server)))
    lat = tally.latencies
    return {
        "seconds": round(time.monotonic() - started, 1),
        "valid_steps": len(lat),
        "valid_p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
        "valid_p99_ms": p99_ms(lat),
        "valid_errors": dict(tally.valid_errors),
        "hostile_outcomes": dict(sorted(tally.hostile.items())),
        "rss_mb": rss,
    }


def rss_verdict(rss: list[tuple[float, float]], warmup_share: float = 0.25, window_s: float = 30.0) -> dict[str, float]:
    """Whether RSS stays flat after warm-up (the first `warmup_share` of the soak).

    The level is the median of the samples in a `window_s` window: a server that frees memory back to the system
    (envgym.sandbox.malloc) swings by some 20 MB from one 5 s sample to the next as megabyte sessions come and go,
    and one low sample taken as the reference would read a swing as growth. `growth_pct` (the acceptance) is the
    highest level after warm-up against the level at its end: memory that piles up raises every later window.
    `spike_pct` is the highest single sample against the same reference, reported beside it.
    """
    end = rss[-1][0]
    after = [(t, mb) for t, mb in rss if t >= warmup_share * end]
    starts = [t for t, _ in after if t + window_s <= end] or [after[0][0]]
    levels = [statistics.median(mb for t, mb in after if start <= t < start + window_s) for start in starts]
    at_warm, highest = levels[0], max(mb for _, mb in after)
    return {"after_warmup_mb": round(at_warm, 1), "max_level_mb": round(max(levels), 1), "max_after_mb": highest,
            "last_mb": rss[-1][1], "growth_pct": round(100 * (max(levels) - at_warm) / at_warm, 1),
            "spike_pct": round(100 * (highest - at_warm) / at_warm, 1)}


def write_markdown(path: Path, result: dict[str, Any]) -> None:
    soak, base = result["soak"], result["baseline"]
    lines = [
        "# Soak: valid and hostile clients against `envgym serve --workers 2` (issue 41)",
        "",
        f"Command: `{result['command']}`  ",
        f"Load average before / after: {result['load_before']} / {result['load_after']} (2 cores, shared).",
        "",
        f"- Clients: {result['valid']} valid (RemoteEnv episodes on {result['env']}, {THINK_S:g} s think time) + "
        f"{result['hostile']} hostile ({HOSTILE_PAUSE_S * 1000:g} ms between one client's attacks), for {soak['seconds']:g} s after a {base['seconds']:g} s baseline of the valid "
        "clients alone.",
        f"- Valid-client step p99: {soak['valid_p99_ms']} ms under attack vs {base['valid_p99_ms']} ms in the baseline "
        f"(**{result['p99_ratio']}x**; goal <= 3x); p50 {soak['valid_p50_ms']} vs {base['valid_p50_ms']} ms.",
        f"- RSS (front + workers, median of 30 s windows): {result['rss']['after_warmup_mb']} MB after warm-up, at "
        f"most {result['rss']['max_level_mb']} MB after it (**{result['rss']['growth_pct']}%**; goal <= 10%); "
        f"highest single sample {result['rss']['max_after_mb']} MB ({result['rss']['spike_pct']}%), "
        f"{result['rss']['last_mb']} MB at the end.",
        f"- Valid-client errors: {soak['valid_errors'] or 'none'} in {soak['valid_steps']} steps.",
        "",
        "## Hostile outcomes (attack:what the server answered)",
        "",
        "| outcome | count |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in soak["hostile_outcomes"].items()),
        "",
        "## RSS over time (MB)",
        "",
        "| t (s) | RSS |",
        "|---|---|",
        *(f"| {t:g} | {mb:g} |" for t, mb in soak["rss_mb"]),
        "",
    ]
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/soak.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="length of the soak (default 10)")
    p.add_argument("--clients", type=int, default=64, help="clients in all, valid and hostile")
    p.add_argument("--hostile", type=int, default=16, help="how many of the clients attack")
    p.add_argument("--baseline-s", type=float, default=30.0, help="valid clients alone first, for this long")
    p.add_argument("--env", default="calculator")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling interval")
    p.add_argument("--attacks", default="", help="comma-separated attack names (default: all of them)")
    p.add_argument("--hostile-nice", type=int, default=0,
                   help="nice value of the hostile process (attackers elsewhere cost the server's cores nothing)")
    p.add_argument("--out", default=None, help="write the Markdown report here (e.g. docs/results/soak.md)")
    args = p.parse_args(argv)
    valid = args.clients - args.hostile
    # Abandoned sessions are reaped after 20 s idle, so their memory is part of the steady state being measured.
    server = start_server(args.env, args.workers, max_sessions=4096, extra=("--session-idle", "20"))
    token = Path(server.token_file).read_text().strip()
    load_before = [round(x, 2) for x in os.getloadavg()]
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                      transient=False, disable=not sys.stderr.isatty()) as progress:
            baseline = run_phase(server, token, valid, 0, args.baseline_s, args.sample_s, progress, "baseline")
            soak = run_phase(server, token, valid, args.hostile, 60 * args.minutes, args.sample_s, progress, "soak",
                             tuple(a for a in args.attacks.split(",") if a), args.hostile_nice)
    finally:
        server.stop()
    result = {
        "command": "python benchmarks/soak.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "env": args.env, "workers": args.workers, "valid": valid, "hostile": args.hostile,
        "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
        "baseline": baseline, "soak": soak,
        "p99_ratio": round(soak["valid_p99_ms"] / baseline["valid_p99_ms"], 2),
        "rss": rss_verdict(soak["rss_mb"]),
    }
    print(json.dumps(result))
    if args.out:
        write_markdown(REPO_ROOT / args.out if not os.path.isabs(args.out) else Path(args.out), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
