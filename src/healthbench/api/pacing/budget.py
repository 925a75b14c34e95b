"""How many requests may be in flight at once: a budget shared by every client given it, that may follow the
limit it serves.

A fixed budget is a plain limit. A budget with a `ceiling` above its size grows, once the limits are known, to
what the pace of each key it serves needs (Little's law: the pace's rate times the latency seen, with a
margin, as `Gate.in_flight_needed` estimates it) and shrinks back as a 429 cuts that pace; never below its
size, never above its ceiling. Over-provisioning costs nothing: the pace, not the budget, holds starts back.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Budget:
    """A limit on requests in flight; see the module docstring. Loop-bound pieces are made per running loop."""

    def __init__(self, limit: int, ceiling: int | None = None) -> None:
        if limit < 1:
            raise ValueError("concurrency must be at least 1")
        self.floor = limit
        self.ceiling = max(limit, ceiling or limit)
        self.limit = limit
        self._needs: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def adaptive(self) -> bool:
        """Whether the budget may grow past its size."""
        return self.ceiling > self.floor

    def need(self, source: object, in_flight: int | None) -> None:
        """What the pace of `source` (one key's gate) needs in flight now; None: nothing known yet. The budget
        becomes the sum over its sources, within its size and ceiling."""
        if not self.adaptive:
            return
        if in_flight is None:
            self._needs.pop(source, None)
        else:
            self._needs[source] = in_flight
        self.limit = min(self.ceiling, max(self.floor, sum(self._needs.values())))
        self._wake()

    def _bind(self) -> None:
        # An asyncio future serves one loop only: a new loop starts with a budget of its own, as a new semaphore.
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._in_use, self._waiters = loop, 0, deque()

    def _wake(self) -> None:
        while self._waiters and self._in_use < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_use += 1
                waiter.set_result(None)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one place in flight for the duration of the block, in arrival order."""
        self._bind()
        if self._in_use < self.limit and not self._waiters:
            self._in_use += 1
        else:
            assert self._loop is not None
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._in_use -= 1  # granted as it was cancelled: give the place back
                    self._wake()
                raise
        try:
            yield
        finally:
            self._in_use -= 1
            self._wake()
