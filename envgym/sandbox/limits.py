"""What one client may make a server hold: bytes, connections and time. Written once for every server.

The in-sandbox server and `envgym serve` run the same HTTP front (`envgym.sandbox.httpd`) with these limits;
they differ only in the body cap (sandboxes receive archives, env servers receive actions).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ServerLimits:
    """Every bound the HTTP front enforces. A request that breaks one gets a typed error and its connection closed.

    Attributes:
        max_connections: open connections at once. At the limit a new connection evicts the one that has waited
            longest for a request (idle keep-alive, or a request head still arriving); when every connection is
            busy it gets 503 and is closed. Lowered to what the process's file descriptor limit allows.
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
    """

    max_connections: int = 1024
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

    def connection_budget(self) -> int:
        """`max_connections`, lowered so connections can never exhaust the process's file descriptors.

        Raises the soft RLIMIT_NOFILE towards the hard one first (never lowers it): a default soft limit of 1024 is
        what let 1,100 idle connections kill the old server.
        """
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = self.max_connections + self.fd_reserve
        if soft != resource.RLIM_INFINITY and soft < wanted:
            target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass  # keep the soft limit we have; the budget below follows it
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(1, min(self.max_connections, soft - self.fd_reserve))


SANDBOX_LIMITS = ServerLimits()
# Env servers receive actions and options, never archives.
ENV_SERVER_LIMITS = replace(SANDBOX_LIMITS, max_body_bytes=8 << 20)
