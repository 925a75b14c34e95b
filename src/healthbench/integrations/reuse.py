"""What a trainer's rewards pay for once: a sample sent again, or twice at once, reuses the verdicts already paid
for the same task and reply, and nobody pays for grading nobody waits for.

OpenRLHF sends each rollout in a request of its own and, when no answer comes within its 180 s timeout, sends it
again (five tries), with no id to tell it is the same; a GRPO step may hold the same reply to a task more than once.
On the trainer routes (`serve`'s `/rewards` and `/openrlhf`, the in-process TRL and verl rewards) a `Reuse` keeps:

- the verdicts paid for, for `window` seconds (15 minutes: OpenRLHF's five tries of 180 s and more), at most
  `most` of them (the oldest go first): a grader request already answered, its rubric item of the same task and
  reply, is not asked again, whichever request asked it first, even one whose client has gone since. The same text
  then gets the same reward;
- the gradings in flight, by task and reply: a second request for one being graded waits for it rather than
  grading it again; when the last request waiting for a grading is gone (its client disconnected, its step
  cancelled), the grading is cancelled, and the verdicts that came in by then stay kept.

The grading commands (`grade`, `eval`, ...), the environment's sessions and the other integrations never reuse a
verdict so: every sample there is graded on its own, as the reference grades it.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from healthbench.api.wire import Usage
from healthbench.grading.verdict import Verdict

REUSE_WINDOW = 900.0  # seconds a verdict paid for is kept for a sample sent again
MOST_VERDICTS = 100_000  # verdicts kept at most: a few steps of 1,024 replies, tens of MB

T = TypeVar("T")


class Verdicts:
    """Verdicts by grader request (a `VerdictCache`), each kept `window` seconds, at most `most` of them. Safe to
    use from several threads (a trainer's reward workers may grade on loops of their own)."""

    def __init__(
        self, window: float = REUSE_WINDOW, most: int = MOST_VERDICTS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window = window
        self.most = most
        self._clock = clock
        self._kept: OrderedDict[str, tuple[float, Verdict, Usage]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._kept)

    def get_verdict(self, key: str) -> tuple[Verdict, Usage] | None:
        """The verdict kept for this request, with what it cost, if it is still in its window."""
        with self._lock:
            self._expire(self._clock())
            found = self._kept.get(key)
        return None if found is None else (found[1], found[2])

    def put_verdict(self, key: str, verdict: Verdict, usage: Usage) -> None:
        """Keep a verdict paid for now, for `window` seconds."""
        with self._lock:
            now = self._clock()
            self._kept.pop(key, None)
            self._kept[key] = (now + self.window, verdict, usage)
            self._expire(now)

    def _expire(self, now: float) -> None:
        # Kept in the order they came, each for the same window: the first is the first to go.
        while self._kept and (len(self._kept) > self.most or next(iter(self._kept.values()))[0] <= now):
            self._kept.popitem(last=False)


@dataclass
class _Flight:
    task: asyncio.Task[Any]
    waiters: int = 0


class Reuse:
    """The verdicts and the gradings in flight of one grader's trainer rewards (see the module docstring)."""

    def __init__(self, verdicts: Verdicts | None = None) -> None:
        self.verdicts = verdicts if verdicts is not None else Verdicts()
        self._flights: dict[tuple[int, Hashable], _Flight] = {}

    async def shared(self, key: Hashable, grading: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, bool]:
        """What `grading()` gives, made once for all who ask for `key` while it runs: the result, and whether this
        caller joined a grading another started (so paid nothing for it). When every caller has gone (cancelled),
        the grading is cancelled too, and awaited, so no grader call outlives the last who waited for it."""
        loop = asyncio.get_running_loop()
        slot = (id(loop), key)
        flight = self._flights.get(slot)
        joined = flight is not None
        if flight is None:
            flight = _Flight(loop.create_task(grading()))
            self._flights[slot] = flight
            flight.task.add_done_callback(functools.partial(self._landed, slot, flight))
        flight.waiters += 1
        try:
            result: T = await asyncio.shield(flight.task)
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not flight.task.done():
                flight.task.cancel()
                await asyncio.wait([flight.task])
        return result, joined

    def _landed(self, slot: tuple[int, Hashable], flight: _Flight, _: object) -> None:
        if self._flights.get(slot) is flight:
            del self._flights[slot]
        if not flight.task.cancelled():
            flight.task.exception()  # retrieved here, for a grading whose last caller left as it failed
