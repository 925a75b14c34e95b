"""A judge server's capacity as the fake plays it: at most ``max_running`` requests in service at once, the rest
waiting their turn in arrival order, as vLLM's scheduler holds requests past ``max_num_seqs`` (latency grows,
nothing is refused). Without a ``max_running`` (the default) every request is served at once, as the fake always
did.

It counts what vLLM's gauges show (``running``, ``waiting``) and their peaks since the last ``reset``. A test can
``pause`` the service: requests in service stay there, unanswered, keeping their slots (so the rest keep waiting),
until ``resume``; a state such as "N running, k waiting" can then be waited for and seen without timing anything.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

from healthbench.errors import SettingsError

__all__ = ["Capacity"]


class Capacity:
    """Slots in service, and a queue for them; see the module docstring. One event loop's: every method but the
    constructor runs on it."""

    def __init__(self, max_running: int | None = None) -> None:
        if max_running is not None and max_running < 1:
            raise SettingsError("max_running must be a positive number of requests")
        self.max_running = max_running
        self.running = 0
        self._queue: deque[asyncio.Future[None]] = deque()
        self._open = asyncio.Event()
        self._open.set()
        self.reset()

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        return len(self._queue)

    def reset(self) -> None:
        """Start the peaks afresh from what is running and waiting now."""
        self.peak_running = self.running
        self.peak_waiting = self.waiting

    def pause(self) -> None:
        """Hold the requests in service, and those that come into it, until ``resume``."""
        self._open.clear()

    def resume(self) -> None:
        """Let the requests in service be answered."""
        self._open.set()

    def answer_held(self) -> None:
        """Answer the requests held now, and go on holding those that come into service after them: a paused
        service's one step (those answered were waiting on the event; setting it lets each of them on)."""
        self._open.set()
        self._open.clear()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot in service for the body of the ``async with``: at once if one is free and nothing waits, else
        after every request that came before. Leaving it hands the slot to the first in the queue."""
        if self.max_running is None or (self.running < self.max_running and not self._queue):
            self.running += 1
        else:
            await self._wait()
        self.peak_running = max(self.peak_running, self.running)
        try:
            yield
            await self._open.wait()
        finally:
            self._leave()

    async def _wait(self) -> None:
        """Wait in the queue until a leaving request hands over its slot (``running`` then already counts it)."""
        turn = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        self.peak_waiting = max(self.peak_waiting, len(self._queue))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.cancelled():
                with contextlib.suppress(ValueError):  # a leaving request may have passed over it already
                    self._queue.remove(turn)
            else:  # handed a slot just as it was cancelled: it goes to the next in line
                self._leave()
            raise

    def _leave(self) -> None:
        """Hand the slot to the first request still waiting, or free it."""
        while self._queue:
            turn = self._queue.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.running -= 1
