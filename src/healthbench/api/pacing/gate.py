"""The async layer of pacing: `Gate` lets one key's starts go in arrival order, each when both this process's
`Pacer` and the key's `PaceState` (local, or shared through a store) allow it; `Budget` limits the requests in
flight.

A fixed budget is a plain limit. A budget with a `ceiling` above its size grows, once the limits are known, to
what the pace of each key it serves needs (Little's law: the pace's rate times the latency seen, with a margin,
as `Gate.in_flight_needed` estimates it) and shrinks back as a 429 cuts that pace; never below its size, never
above its ceiling. Over-provisioning costs nothing: the pace, not the budget, holds starts back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from healthbench.api.failures import RateLimited, read_refusal
from healthbench.api.pacing.pacer import Pace, Pacer
from healthbench.api.pacing.state import Effects, Limits, LocalPace, PaceState
from healthbench.errors import QuotaExhausted, SettingsError

if TYPE_CHECKING:
    from healthbench.api.pacing.siblings import Siblings

# A shared pace reserves a start this close (one call to the store for each start, and processes take turns
# instead of racing); a local one asks again after every wait, since an answer can move a start either way.
_RESERVE = 0.1
_NEEDED_EVERY = 1.0  # seconds between two estimates of the requests in flight the pace needs


class Gate:
    """One key's starts: see the module docstring. Only the first waiter asks the pace and sleeps; an answer
    wakes it to look again. Loop-bound pieces are made per running loop, as `Budget` makes its own.

    `siblings` are the gates of the other keys at the same endpoint (`keygates` sets them): a key refused by a
    limit that another key's starts spend too paces through that key's state from then on (`pacing.siblings`)."""

    def __init__(self, state: PaceState | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.state: PaceState = state if state is not None else LocalPace(clock)
        self.pacer = Pacer(shared=self.state.shared)
        self._clock = clock
        self._horizon = _RESERVE if self.state.shared else 0.0
        self._user: Limits = (None, None)
        self._pending = Effects()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()
        self._applying = asyncio.Lock()
        self._waker: asyncio.Future[None] | None = None
        self._by_answers = False  # whether the waiter's wait is this process's own, which answers shorten
        self._needed: tuple[float, int | None] = (-_NEEDED_EVERY, None)
        self.siblings: Siblings[PaceState] | None = None

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._lock, self._applying = loop, asyncio.Lock(), asyncio.Lock()
            self._waker = None

    def set_limits(self, rpm: float | None, tpm: float | None) -> None:
        """The user's limits: they come before anything the server says; the lower of two settings stands."""
        self._user = (_lower(self._user[0], rpm), _lower(self._user[1], tpm))

    def skip_slow_start(self) -> None:
        """Let this process's starts go at once while no limit of the key is known (`Pacer.skip_slow_start`)."""
        self.pacer.skip_slow_start()

    @property
    def limits(self) -> Limits:
        """The request and token limits a minute in force (None: not known)."""
        known = self.pacer.limits
        return (self._user[0] or known[0], self._user[1] or known[1])

    async def start(self, cost: int) -> int:
        """Wait until a request of `cost` tokens may start and record its start; returns its ticket."""
        self._bind()
        async with self._lock:
            reserved = await self._admitted(cost)
        # A reserved start sleeps out its slot after the next waiter may ask: the store's round trips overlap the
        # sleeps, instead of adding to every start.
        if reserved > 0:
            await asyncio.sleep(reserved)
        return self.pacer.start(self._clock(), cost)

    async def _admitted(self, cost: int) -> float:
        """Wait until the pace admits a start of `cost` (0 returned) or reserves one that many seconds ahead."""
        await self._apply()
        while True:
            now = self._clock()
            wait, reason, ahead = self.pacer.delay(now, cost)
            # A wait of this process's own (the probe's window, the server's reported budget) may end with any
            # answer; the pace's may end sooner only by what the answers change in it (`Effects`), or in time.
            by_answers = wait > 0
            if wait <= 0:
                admission = await self.state.admit(self.pacer.scaled(cost), self._horizon, ahead, self._user)
                self.pacer.adopt(self._clock(), admission)
                if admission.reserved or admission.wait <= 0:
                    return admission.wait if admission.reserved else 0.0
                wait, reason = admission.wait, admission.reason
            self.pacer.bound(now, reason)
            await self._nap(wait, by_answers)

    async def _nap(self, seconds: float, by_answers: bool) -> None:
        """Sleep up to `seconds`, or until `_wake` says the wait may be shorter now: one future and one timer, not
        a task per wait, and one wake-up a start where only time can let it go."""
        assert self._loop is not None
        waker: asyncio.Future[None] = self._loop.create_future()
        self._waker = waker
        self._by_answers = by_answers
        timer = self._loop.call_later(seconds, _settle, waker)
        try:
            await waker
        finally:
            timer.cancel()
            self._waker = None

    def _wake(self, changed: bool) -> None:
        """Let the waiter that asks the pace look again, if what it waits for may have changed: the pace
        (`changed`), or, for a wait of this process's own, anything an answer tells."""
        if self._waker is not None and (changed or self._by_answers):
            _settle(self._waker)

    async def _apply(self, effects: Effects | None = None) -> None:
        """Hand effects to the state: one call at a time, what piled up meanwhile merged into one."""
        if effects:
            self._pending = self._pending.merge(effects)
        async with self._applying:
            pending, self._pending = self._pending, Effects()
            if pending:
                await self.state.apply(pending)
        self._wake(bool(pending))

    async def answered(self, ticket: int, headers: Mapping[str, str]) -> None:
        """Report an answer other than a 429."""
        self._bind()
        await self._apply(self.pacer.on_answer(self._clock(), ticket, headers))

    async def refused(self, ticket: int, cost: int, body: bytes, headers: Mapping[str, str]) -> float | None:
        """Report a 429; returns how long the refused request waits before it is asked again (0: at once, through
        this gate; None: the retry table's backoff). `QuotaExhausted` if the account has no quota left."""
        self._bind()
        refusal: RateLimited = read_refusal(body, headers)
        effects, retry = self.pacer.on_refused(self._clock(), ticket, cost, refusal, headers)
        await self._apply(effects)
        if self.siblings is not None and effects.slow is not None and effects.slow.hard:
            self.siblings.refused(self)
        self._wake(True)  # a quota refusal changes nothing in the pace but stops every start
        if refusal.quota:
            raise QuotaExhausted()
        return retry

    def lost(self, ticket: int) -> None:
        """Report a request that got no answer."""
        self.pacer.on_lost(self._clock(), ticket)
        self._wake(False)

    def in_flight_needed(self) -> int | None:
        """Requests in flight the pace needs (Little's law), estimated at most once a second; None while no
        limit is known."""
        now = self._clock()
        if now - self._needed[0] >= _NEEDED_EVERY:
            self._needed = (now, self.pacer.in_flight_needed())
        return self._needed[1]

    def status(self) -> Pace:
        """The pace now, for the progress bar."""
        return self.pacer.status(self._clock())


def _settle(waker: asyncio.Future[None]) -> None:
    if not waker.done():
        waker.set_result(None)


def _lower(held: float | None, given: float | None) -> float | None:
    return given if held is None else held if given is None else min(held, given)


class Claimant(Protocol):
    """Who waits for places of a budget without queueing in its `slot`: a router with requests for its servers
    (`api.routing.Router`)."""

    def offered(self, budget: Budget) -> bool:
        """A place at `budget`, already held for the claimant: True if it puts a request there, False to give it
        back (none of its requests can use it)."""


class Budget:
    """A limit on requests in flight, shared by every client given it: see the module docstring. Loop-bound
    pieces are made per running loop."""

    def __init__(self, limit: int, ceiling: int | None = None) -> None:
        if limit < 1:
            raise SettingsError("concurrency must be at least 1")
        self.floor = limit
        self.ceiling = max(limit, ceiling or limit)
        self.limit = limit
        self._needs: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Routers with requests waiting for a place here, offered each free place in turn (`claim`, `offer`).
        self._claimants: deque[Claimant] = deque()
        self._offering: asyncio.Handle | None = None

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
            self._loop, self._in_use, self._waiters, self._claimants = loop, 0, deque(), deque()
            self._offering = None

    def _wake(self) -> None:
        while self._waiters and self._in_use < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_use += 1
                waiter.set_result(None)
        if self._claimants and self._in_use < self.limit and self._offering is None and self._loop is not None:
            # Offered once what frees the place has run its course: a request that failed frees its place before its
            # server is known to be out, and the place is not offered to that server's queue meanwhile.
            self._offering = self._loop.call_soon(self._offer_now)

    def _offer_now(self) -> None:
        self._offering = None
        self.offer()

    @property
    def in_use(self) -> int:
        """Places held now, in the running loop."""
        self._bind()
        return self._in_use

    def take(self) -> bool:
        """Hold one place now if one is free and nobody waits for one (in `slot`, or a claimant); give it back with
        `give_back`. False if not: wait in `slot`, or `claim`."""
        self._bind()
        if self._in_use < self.limit and not self._waiters and not self._claimants:
            self._in_use += 1
            return True
        return False

    def give_back(self) -> None:
        """Free a place held by `take` or an offer."""
        self._in_use -= 1
        self._wake()

    def claim(self, claimant: Claimant) -> None:
        """`claimant` waits for places here: each free place is offered to the claimants in turn (`offer`) until it
        says `withdraw`. Every claimant is offered one before any is offered a second, so none waits without bound."""
        self._bind()
        if claimant not in self._claimants:
            self._claimants.append(claimant)

    def withdraw(self, claimant: Claimant) -> None:
        """`claimant` waits for no place here any more."""
        if claimant in self._claimants:
            self._claimants.remove(claimant)

    def offer(self) -> bool:
        """Offer the free places to the claimants, in turn, until the places or the claimants that want one run out;
        whether any was taken."""
        taken = False
        turns = len(self._claimants)
        while turns and self._in_use < self.limit and not self._waiters:
            claimant = self._claimants[0]
            self._claimants.rotate(-1)
            self._in_use += 1
            if claimant.offered(self):
                taken = True
                turns = len(self._claimants)
            else:
                self._in_use -= 1
                turns -= 1
        return taken

    @contextlib.asynccontextmanager
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


class Budgets:
    """A budget for each server, made on first use and shared by every client given this: clients of several
    servers (a pool of judge servers) hold `limit` places at each, growing to `ceiling`, rather than one bound
    for all of them together."""

    def __init__(self, limit: int, ceiling: int | None = None) -> None:
        Budget(limit, ceiling)  # the same settings refused the same way
        self.limit = limit
        self.ceiling = ceiling
        self._by_server: dict[str, Budget] = {}

    def of(self, server: str) -> Budget:
        """The budget of the server at `server` (its base URL)."""
        budget = self._by_server.get(server)
        if budget is None:
            budget = self._by_server[server] = Budget(self.limit, self.ceiling)
        return budget
