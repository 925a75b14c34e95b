"""Room for a client's connections among the process's open files.

Every connection in flight is a socket, and a socket is a file descriptor. Linux starts most processes with a soft
limit of 1,024 descriptors (the hard limit is usually far higher), while a pool of judge servers may be given
several thousand requests in flight at once; past the soft limit, connections fail with "Too many open files". The
soft limit is raised (never lowered) to what the connections need with room for the process's other files, as far
as the hard limit allows; where it cannot go that far, one line says so and the connections past it fail as they
would have.
"""

from __future__ import annotations

import logging

log = logging.getLogger("healthbench.api")

SPARE = 256
"""Descriptors kept for what else the process opens: its run folder's files, the store, a server's own sockets."""


def make_room(connections: int) -> None:
    """Let the process hold `connections` sockets besides `SPARE` other files, raising the soft limit if need be."""
    try:
        import resource
    except ImportError:  # not a POSIX system: its limits are its own
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + SPARE
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < wanted:
        log.warning(
            "%d requests in flight need about %d open files, and this process may open %d (ulimit -n): raise the "
            "hard limit, or give a smaller concurrency",
            connections,
            wanted,
            target,
        )
