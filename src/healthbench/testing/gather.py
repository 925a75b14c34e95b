"""Requests held until so many are in flight at once: how a test tells requests sent together from requests sent one
after another without timing anything (a `FakeOpenAI`'s `gathering`, read with its `max_in_flight`)."""

from __future__ import annotations

import asyncio
import contextlib


class Gathering:
    """With a `size`, holds each request until `size` are in flight at once, then lets them all go on; a request
    waits `patience` seconds at most. Once none is in flight, the next requests gather afresh. Without a `size`
    (the default) nothing is held. Both may be changed between requests. One event loop's."""

    def __init__(self, size: int | None = None, patience: float = 2.0) -> None:
        self.size = size
        self.patience = patience
        self._gathered: asyncio.Event | None = None

    async def hold(self, in_flight: int) -> None:
        """Wait, as one of `in_flight` requests now, until `size` are in flight or `patience` seconds have passed."""
        if self.size is None:
            return
        if self._gathered is None:
            self._gathered = asyncio.Event()
        if in_flight >= self.size:
            self._gathered.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.patience):
                await self._gathered.wait()

    def settled(self, in_flight: int) -> None:
        """A request has finished, leaving `in_flight`."""
        if in_flight == 0 and self._gathered is not None:
            self._gathered.clear()
