"""What one client may make a server hold: bytes, connections and time. Written once for every server.

The in-sandbox server and `envgym serve` run the same HTTP front (`envgym.sandbox.httpd`) with these limits;
they differ only in the body cap (sandboxes receive archives, env servers receive actions).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ServerLimits:
    """Every bound the HTTP front enforces. A request that breaks one gets a typed error and its connection closed.

    Attributes:
        max_connections: open connections at once; None (the default) derives it from the file descriptor
            limit and memory (see `connection_budget`). At the limit a new connection evicts the one that has
            waited longest for a request (idle keep-alive, or a request head still arriving; never one whose
            request is being read, run or answered); when every connection is busy it gets 503 and is closed.
            A number given is still lowered to what the file descriptor limit and memory allow.
        max_header_bytes: request line plus headers; more gets 431.
        max_headers: header lines in one request; more gets 431.
        max_body_bytes: the largest Content-Length accepted; more gets 413 before any of the body is read.
        header_timeout_s: a new connection must deliver a whole request head within this (slowloris).
        keepalive_idle_s: an idle keep-alive connection is closed after this long without a new request.
        body_timeout_s: longest pause while a body arrives or a response is written; then 408 and close.
        linger_s, linger_bytes: after a rejected request the server half-closes and discards at most this much of
            what the client is still sending (so the client reads the error instead of a reset), then closes.
        handler_threads: requests running at once (commands, env steps); more wait their turn.
        fd_reserve: file descriptors kept free of connections for pipes, files and environments.
        connection_bytes: what one open connection is reckoned to cost (its buffers, transport and task, with
            room to spare); the memory part of the connection budget.
        connection_memory_share: the share of the memory available at start that connections may take.
        body_deadline_s: a whole request body must arrive within this, however it is paced (`body_timeout_s` bounds
            one pause only, and a byte every 29 s held a connection forever); then 408 and close.
        max_buffered_body_bytes: request bodies held by the server at once, all connections together (announced
            Content-Lengths, from the head until the handler is done). A body that would pass it gets 429
            `BudgetExceeded` before any of it is read: 60 connections each sending just under the cap took +460 MB.
        inline_body_bytes: a request whose body is larger runs on a handler thread even where its route is quick
            enough for the event loop: parsing and hashing a megabyte action there held every other connection
            of the process for milliseconds (benchmarks/soak.py).
    """

    max_connections: int | None = None
    max_header_bytes: int = 32 << 10
    max_headers: int = 100
    max_body_bytes: int = 256 << 20
    header_timeout_s: float = 10.0
    keepalive_idle_s: float = 30.0
    body_timeout_s: float = 30.0
    linger_s: float = 1.0
    linger_bytes: int = 1 << 20
    handler_threads: int = 256
    fd_reserve: int = 128
    connection_bytes: int = 64 << 10
    connection_memory_share: float = 0.125
    body_deadline_s: float = 120.0
    max_buffered_body_bytes: int = 512 << 20
    inline_body_bytes: int = 64 << 10

    def connection_budget(self) -> int:
        """Connections this process may hold: `max_connections` (None: no bound of its own), lowered to the file
        descriptors left after `fd_reserve` and to `connection_memory_share` of the memory available.

        Raises the soft RLIMIT_NOFILE to the hard one first (never lowers it): a default soft limit of 1024 is what
        let 1,100 idle connections kill an old server, and what capped a worker at 1,024 clients.
        """
        by_fds = raise_fd_limit() - self.fd_reserve
        by_memory = int(self.connection_memory_share * available_memory_bytes() / self.connection_bytes)
        bounds = [by_fds, by_memory] + ([self.max_connections] if self.max_connections is not None else [])
        return max(1, min(bounds))


@dataclass(frozen=True)
class SessionLimits:
    """How many env sessions a server holds at once (`envgym serve --max-sessions`, all workers together).

    Attributes:
        max_sessions: sessions at once; None (the default) derives it from memory (see `session_budget`).
            A create beyond it is refused with `EnvHostError: too many sessions`.
        session_bytes: what one live session is reckoned to cost. Measured: 0.06 to 0.09 MiB for retail and
            calculator (docs/results/sessions.md); reckoned at 128 KiB for larger worlds and heap growth.
        session_memory_share: the share of the memory available at start that sessions may take.
    """

    max_sessions: int | None = None
    session_bytes: int = 128 << 10
    session_memory_share: float = 0.5

    def session_budget(self) -> int:
        """`max_sessions` when given, else what `session_memory_share` of the available memory holds."""
        if self.max_sessions is not None:
            return self.max_sessions
        return max(1, int(self.session_memory_share * available_memory_bytes() / self.session_bytes))


@dataclass(frozen=True)
class EpisodeLimits:
    """What one env session may make the server hold or compute per episode. Hitting one gives 429 `BudgetExceeded`
    (`envgym.sandbox.errors.BudgetExceededError`) naming the budget; a reset starts the counts again.

    Found by attack: a client's `max_steps` had no bound, every step kept the whole action and tool result, and a step
    without `held` encoded the whole conversation on the event loop (8,000 steps: +400 MB; one 25 KB request: a 204 MB
    answer; health 5 ms -> 522 ms).

    Attributes:
        max_steps: steps per episode, and the largest `max_steps` a client may ask for (`EnvOptions.max_steps`).
        max_messages: conversation messages per episode (`info["messages"]`): no step is taken past it.
        max_action_bytes: bytes of actions per episode, all steps together (what the client makes the env keep).
        max_response_bytes: the largest reset or step answer; a bigger one is refused (ask with `held`, info
            deltas, to be sent only the new messages).
        inline_encode_bytes: a session whose last answer was larger than this runs its resets and steps on handler
            threads, so large encodes never stall the event loop (health checks, other sessions).
    """

    max_steps: int = 1000
    max_messages: int = 4000
    max_action_bytes: int = 32 << 20
    max_response_bytes: int = 32 << 20
    inline_encode_bytes: int = 256 << 10


@dataclass(frozen=True)
class McpLimits:
    """What clients may make `envgym mcp serve` hold.

    Attributes:
        max_sessions: MCP sessions (one world each) open at once over HTTP; one more gets 503 "Too many open
            sessions" from the SDK (925 sessions at about 104 kB each were taken in 90 s before).
        session_idle_timeout_s: an HTTP session without a request for this long is ended and its world dropped.
        max_stdio_line_bytes: the longest JSON-RPC message line read over stdio. A longer one is read through and
            dropped as it arrives (a 200 MB line was buffered whole and peaked at 1.19 GB); its request gets an
            error result saying it was not run and that the episode goes on.
    """

    max_sessions: int = 256
    session_idle_timeout_s: float = 300.0
    max_stdio_line_bytes: int = 4 << 20


EPISODE_LIMITS = EpisodeLimits()
MCP_LIMITS = McpLimits()

_NR_OPEN = "/proc/sys/fs/nr_open"
_MEMINFO = "/proc/meminfo"
_CGROUP = "/sys/fs/cgroup"


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one (an unlimited hard one: to the kernel's per-process maximum);
    returns the soft limit now in force. A limit that cannot be raised is kept."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = _read_int(_NR_OPEN) or 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= hard:
        return hard if soft == resource.RLIM_INFINITY else soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    except (ValueError, OSError):
        return soft
    return hard


def available_memory_bytes() -> int:
    """Memory this process may still take: the kernel's MemAvailable, lowered to what the cgroup (a container's
    memory limit) has left."""
    available = 0
    try:
        with open(_MEMINFO) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if not available:  # no /proc (not Linux): physical memory, as the C library reports it
        available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    cap, used = _read_int(f"{_CGROUP}/memory.max"), _read_int(f"{_CGROUP}/memory.current")
    if cap is not None and used is not None:
        available = min(available, max(0, cap - used))
    return available


def _read_int(path: str) -> int | None:
    """The integer in a one-line /proc or /sys file; None when it is absent or not a number ("max")."""
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


SANDBOX_LIMITS = ServerLimits()
# Env servers receive actions and options, never archives.
ENV_SERVER_LIMITS = replace(
    SANDBOX_LIMITS, max_body_bytes=8 << 20, body_deadline_s=60.0, max_buffered_body_bytes=64 << 20
)
