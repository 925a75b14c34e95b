"""The calls of one client with a request out, and the halt that keeps it from sending more: when the user stops a
run (Ctrl-C), what is on the wire lands and is stored, and nothing new is sent."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterator

# The `complete` call a request belongs to (whether it has sent one yet).
_CALL: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("healthbench_call", default=None)


class InFlight:
    """The `complete` calls of one client with a request on the wire, and whether it may send more (see
    `ApiClient.halt`). A call counts from its first send until it returns, so a caller that stores the answer on
    return has stored it by the time the count falls to zero."""

    def __init__(self) -> None:
        self.halted = False
        self.count = 0
        self._idle: list[asyncio.Future[None]] = []

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """One `complete` call: counted while it has a request out."""
        sent = [False]
        token = _CALL.set(sent)
        try:
            yield
        finally:
            _CALL.reset(token)
            if sent[0]:
                self._leave()

    @contextlib.asynccontextmanager
    async def out(self) -> AsyncIterator[None]:
        """A request about to be sent; once halted, it waits here until it is cancelled."""
        sent = _CALL.get()
        if self.halted:
            if sent is not None and sent[0]:
                sent[0] = False  # a retry of a call that landed: nothing of it is out now
                self._leave()
            await asyncio.get_running_loop().create_future()
        if sent is not None and not sent[0]:
            sent[0] = True
            self.count += 1
        yield

    def _leave(self) -> None:
        self.count -= 1
        if not self.count:
            for waiter in self._idle:
                if not waiter.done():
                    waiter.set_result(None)
            self._idle.clear()

    async def idle(self) -> None:
        """Return once no call has a request out."""
        if self.count:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            await waiter
