"""How a command stops on Ctrl-C and on SIGTERM (docker stop, systemd, SLURM): alike, in one line. A run's loop
stops on either itself (`runs.session`: what is on the wire lands first); outside it SIGTERM raises `Terminated`
where Ctrl-C raises `KeyboardInterrupt`."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

import click

# The exit status of a command the user interrupted (128 + SIGINT) or that was told to stop (128 + SIGTERM: docker
# stop, systemd, SLURM), as a shell reports it.
INTERRUPTED = 130
TERMINATED = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM outside a run's loop (which stops on it itself, as on Ctrl-C): raised where Ctrl-C would raise
    `KeyboardInterrupt`, so it unwinds as Ctrl-C does."""


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """While the block runs in the main thread (the only one that takes signals), SIGTERM raises `Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stopped(line: str, by_sigterm: bool) -> NoReturn:
    """Say how a command was stopped, in one line, and exit as a shell reports it."""
    click.echo(f"healthbench: {line}", err=True)
    sys.exit(TERMINATED if by_sigterm else INTERRUPTED)
