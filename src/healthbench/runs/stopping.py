"""How a run's event loop takes Ctrl-C and SIGTERM (docker stop, systemd, SLURM): alike, and in two steps.

The first signal cancels the run's task: nothing more is sent, and what is on the wire lands in the store before the
run stops (`runs.session`). A second one, while that wind-down waits, ends the wait at once: the run stops with
what had landed, in the same one line. Both are taken by the loop itself (`loop.add_signal_handler`), so neither
raises `KeyboardInterrupt` in the middle of the loop: that way asyncio's runner cancelled the tasks under it, and
their gathered futures each logged a traceback ("_GatheringFuture exception was never retrieved").
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


class Stopping:
    """The signals a run received: `signal` names the first (None before any), `hurry` is set by a later one, or
    by any once the run is winding down."""

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.signal: str | None = None
        self.winding_down = False
        self.hurry = asyncio.Event()
        self._task = task

    def receive(self, name: str) -> None:
        """A signal came: the first cancels the run's task, a later one (or any while it winds down) hurries it."""
        if self.signal is None and not self.winding_down:
            self.signal = name
            self._task.cancel()
        else:
            self.hurry.set()

    async def hurried(self) -> None:
        """Return when a second signal has come."""
        await self.hurry.wait()


@contextmanager
def signals_stop(stopping: Stopping) -> Iterator[None]:
    """While the block runs in the main thread's loop, Ctrl-C and SIGTERM go to `stopping`. The handlers they had
    before are back once the block is left. Where the loop takes no signal handlers (not the main thread, Windows),
    nothing changes: Ctrl-C cancels the run's task as asyncio's runner does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    installed = []
    try:
        for signum, name in _SIGNALS.items():
            loop.add_signal_handler(signum, stopping.receive, name)
            installed.append(signum)
    except NotImplementedError:
        pass
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
            handler = previous[signum]
            if handler is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(signum, handler)
