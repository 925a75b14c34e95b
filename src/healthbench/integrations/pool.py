"""`GraderPool`: one live grader per distinct settings and key, shared by its callers and kept warm between them.

A grader owns a client: its HTTP connections and its key's pace (what it has learned of the key's limits, from
headers and 429s). A grader built afresh for each caller starts cold: new connections, a host not yet known to
take `prompt_cache_key` (until it has answered, one request carries it and the others go without), and a pace that
knows nothing of the key's limits (with the slow start, twenty requests until the first answer, so a reply of more
rubric items waits a second round). So a grader outlives its callers: it stays open for `idle` seconds after the
last of them leaves (5 minutes by default), and the next caller of the same settings and key in that time takes it
over as it is, connections, pace and all.

Graders belong to the event loop that opened them, since an HTTP session is bound to its loop: each loop has
graders of its own, never shared with another. Each loop's graders are kept by one task in that loop, which closes
a grader once it has been idle for `idle` seconds, and closes them all when the loop ends (`asyncio.run`, uvicorn
and Inspect cancel what is left of a loop's tasks as it ends, so nothing outlives it). With `idle` at 0 a grader
closes as soon as its last caller leaves.

Bound: in each loop, the graders in use (one per settings-and-key being graded now) plus at most `most_idle` idle
ones (256 by default); past that the one idle the longest closes at once, so a server that sees many keys holds
no more than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from healthbench.api.client import Budgets
from healthbench.errors import SettingsError
from healthbench.grading.grader import Grader
from healthbench.grading.settings import GraderConfig

WARM_FOR = 300.0  # seconds an idle grader stays open: longer than a trainer's step, short enough to free a key
MOST_IDLE = 256  # idle graders a loop keeps at most


@dataclass
class _Lease:
    grader: Grader
    users: int = 0
    idle_since: float = 0.0


@dataclass
class _Loop:
    """One event loop's graders, least recently used first, and the task that keeps them."""

    leases: OrderedDict[str, _Lease] = field(default_factory=OrderedDict)
    keeper: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class GraderPool:
    """Graders shared by every caller of one settings-and-key in an event loop, kept `idle` seconds after the last
    leaves (see the module docstring).

    With `concurrency`, every grader draws on one budget of that size at each server (growing with the limits up
    to `ceiling`, if that is larger): graders of one endpoint share its budget, and a pool's servers have one each;
    without, each grader on its own settings' budget. Without `slow_start`, a key its graders know no
    limits of yet is sent the budget's worth at once (`ApiClient`'s `slow_start`): a server's or a trainer's.
    """

    def __init__(
        self,
        concurrency: int | None = None,
        ceiling: int | None = None,
        *,
        idle: float = WARM_FOR,
        most_idle: int = MOST_IDLE,
        slow_start: bool = True,
    ) -> None:
        if idle < 0 or most_idle < 0:
            raise SettingsError("idle and most_idle must not be negative")
        self._budget = Budgets(concurrency, ceiling) if concurrency is not None else None
        self.idle = idle
        self.most_idle = most_idle
        self.slow_start = slow_start
        self._loops: dict[asyncio.AbstractEventLoop, _Loop] = {}

    def live(self) -> int:
        """The graders open now, in use or idle, in every loop."""
        return sum(len(here.leases) for here in self._loops.values())

    @asynccontextmanager
    async def lease(self, config: GraderConfig) -> AsyncIterator[Grader]:
        """The grader of `config` (its key included) in the running loop, for the duration of the block."""
        loop = asyncio.get_running_loop()
        here = self._loops.get(loop)
        if here is None:
            here = _Loop()
            self._loops[loop] = here
        # Keyed by a digest, so the raw key is held only where it is used: the client's headers.
        secret = config.api_key.get_secret_value() if config.api_key is not None else ""
        slot = hashlib.sha256(f"{config.model_dump_json()}\n{secret}".encode()).hexdigest()
        lease = here.leases.get(slot)
        if lease is None:
            lease = _Lease(config.build(budget=self._budget, slow_start=self.slow_start))
            here.leases[slot] = lease
        lease.users += 1
        if self.idle > 0 and here.keeper is None:
            here.keeper = loop.create_task(self._keep(loop, here))
        try:
            yield lease.grader
        finally:
            lease.users -= 1
            if lease.users == 0 and here.leases.get(slot) is lease:
                if self.idle > 0:
                    lease.idle_since = loop.time()
                    here.leases.move_to_end(slot)
                    here.changed.set()
                else:
                    del here.leases[slot]
                    self._forget(loop, here)
                    await lease.grader.client.aclose()

    async def aclose(self) -> None:
        """Close every grader of the running loop, in use or idle."""
        loop = asyncio.get_running_loop()
        here = self._loops.pop(loop, None)
        if here is not None:
            if here.keeper is not None:
                here.keeper.cancel()
            await _close_all(here)

    def _forget(self, loop: asyncio.AbstractEventLoop, here: _Loop) -> None:
        if not here.leases and here.keeper is None and self._loops.get(loop) is here:
            del self._loops[loop]

    async def _keep(self, loop: asyncio.AbstractEventLoop, here: _Loop) -> None:
        """Close each idle grader of `here` when its time is up (or the idle ones past the bound, longest idle
        first), until none is left; all of them when the loop ends (this task is cancelled)."""
        try:
            while here.leases:
                now = loop.time()
                idle = [(slot, lease) for slot, lease in here.leases.items() if lease.users == 0]
                excess = len(idle) - self.most_idle
                for rank, (slot, lease) in enumerate(idle):
                    if rank < excess or now - lease.idle_since >= self.idle:
                        del here.leases[slot]
                        await lease.grader.client.aclose()
                due = [lease.idle_since + self.idle for lease in here.leases.values() if lease.users == 0]
                here.changed.clear()
                # asyncio.timeout, not wait_for: wait_for (3.11) drops a cancellation that comes as the event is
                # set, and the loop's end would then wait out the whole idle time.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, min(due) - loop.time()) if due else None):
                        await here.changed.wait()
        finally:
            here.keeper = None
            await _close_all(here)
            self._forget(loop, here)


async def _close_all(here: _Loop) -> None:
    leases = list(here.leases.values())
    here.leases.clear()
    await asyncio.gather(*(lease.grader.client.aclose() for lease in leases), return_exceptions=True)
