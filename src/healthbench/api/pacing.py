"""When the next request of one client may start, under an account's rate limits as OpenAI enforces them.

OpenAI limits requests and tokens per minute, perhaps over shorter windows; it counts a request's tokens on
arrival as its prompt plus its output cap, and it counts refused requests too, so a client that sends into
a spent limit spends the budget it is waiting for. `Pacer` therefore keeps starts under both limits before
the server has to refuse anything: each limit is paced as a rate (with a small catch-up allowance, so a late
wake-up loses nothing) and, where the server reports what remains, as a mirror of its bucket. The mirror alone
decides (so a run may use the bucket's burst allowance) until the server refuses a request it said would fit;
from then on both must agree.

Limits come from the user, else from the `x-ratelimit-*` headers, else from the numbers in a 429's message;
a 429 also cuts the pace by a tenth (at most once a second, recovering by 2% a second) and holds every new
start until its retry time. With no limit known at all the pace is the one the server has been accepting,
cut and regrown the same way. Until the first answer arrives only one request is out, so a run learns the
limits before it can overrun them. `insufficient_quota` is no limit to wait for: `QuotaExhausted`, at once.

The model is pure: every method takes the time `now` in seconds of any monotonic clock. `Gate` is the thin
async layer on top that the client awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from healthbench.api.ratesignals import Refusal, duration_seconds, header_number, read_refusal
from healthbench.errors import QuotaExhausted

BURST = 0.05  # seconds of pace a late start may catch up on at once
_CUT, _FLOOR, _RECOVERY = 0.9, 0.25, 0.02  # a 429's cut, the lowest factor, the regrowth per second
_WINDOW = 1.0  # one overload answers many requests at once: one cut per window
_PROBE = 5.0  # a first request that takes longer than this does not hold the others back
_MAX_HOLD = 120.0
_EPSILON = 1e-6
_BOUND_FOR = 1.0  # a limit that delayed a start this recently still binds
_SPAN = 5.0  # seconds of starts the reported pace is measured over
_USER, _HEADERS, _MESSAGE = 3, 2, 1  # precedence of a limit's sources


@dataclass(frozen=True)
class Pace:
    """What the progress bar shows: request starts per second lately, and the limit that holds them back."""

    rate: float
    binding: str | None  # "RPM", "TPM", "429" (held after a refusal), or None: not limit-bound

    def __str__(self) -> str:
        return f"{self.rate:.0f} req/s" + (f", {self.binding}-bound" if self.binding else "")


class _Limit:
    """One limit (requests or tokens a minute): its size, its pace, and a mirror of the server's bucket."""

    def __init__(self) -> None:
        self.per_minute: float | None = None
        self.rank = 0
        self.due = -math.inf  # when the pace next allows a start (a theoretical arrival time)
        self.level: float | None = None  # the server's remaining budget, as last reported and replayed
        self.level_at = 0.0
        self.seen = -1  # ticket of the answer that last reported `remaining`
        self.ceiling = 0.0  # the most ever reported remaining: the bucket's size, as far as is known
        self.reset_at = 0.0

    def learn(self, per_minute: float | None, rank: int) -> None:
        if per_minute is not None and per_minute > 0 and rank >= self.rank:
            self.per_minute, self.rank = per_minute, rank

    def refilled(self, now: float) -> float | None:
        """The mirrored budget at `now`; None if nothing is known, or the report has expired."""
        if self.level is None:
            return None
        if self.per_minute is None:
            return self.level if now < self.reset_at else None
        return min(self.ceiling, self.level + self.per_minute / 60 * (now - self.level_at))

    def spend(self, now: float, cost: float) -> None:
        level = self.refilled(now)
        self.level = None if level is None else level - cost
        self.level_at = now

    def wait(self, now: float, cost: float, rate: float | None, trusted: bool) -> float:
        """Seconds until a start of `cost` fits this limit's pace and its mirrored budget; or, with a `trusted`
        mirror of a known limit, its budget alone (the server's own account, burst allowance and all)."""
        level = self.refilled(now)
        if trusted and level is not None and self.per_minute:
            # A margin of BURST's refill, as the server counts a request a little after it starts here.
            rate = self.per_minute / 60
            return (min(cost + rate * BURST, self.ceiling) - level) / rate
        wait = self.due - BURST - now if rate else 0.0
        need = min(cost, self.ceiling)
        if level is not None and level < need:
            refill = (need - level) / (self.per_minute / 60) if self.per_minute else self.reset_at - now
            wait = max(wait, refill)
        return wait


class Pacer:
    """The pacing of one client (one key at one endpoint): see the module docstring. Not thread-safe."""

    def __init__(self, rpm: float | None = None, tpm: float | None = None) -> None:
        self.requests, self.tokens = _Limit(), _Limit()
        self.requests.learn(rpm, _USER)
        self.tokens.learn(tpm, _USER)
        self.quota_exhausted = False
        # The server's reported budget is followed until it refuses a request the mirror said would fit: then
        # its reports are read some other way than this model reads them, and only the pace is trusted.
        self._trusted = True
        self._probing = rpm is None and tpm is None
        self._probe_at: float | None = None
        self._hold_until = -math.inf
        self._factor_cut, self._cut_at = 1.0, -math.inf
        self._free_rate: float | None = None  # the pace with no limit known, once a 429 has set one
        self._in_row = 0
        self._token_scale = 1.0
        self._ticket = 0
        self._starts: deque[tuple[int, float, float]] = deque()  # (ticket, time, tokens), for replay and pace
        self._accepted: deque[float] = deque()
        self._refusals: deque[float] = deque()
        self._first_answer: float | None = None
        self._peak = 0
        self._bound: tuple[str, float] | None = None

    def set_limits(self, rpm: float | None, tpm: float | None) -> None:
        """The user's limits: they come before anything the server says; the lower of two settings stands."""
        for limit, value in ((self.requests, rpm), (self.tokens, tpm)):
            if value is not None:
                limit.learn(value if limit.rank < _USER else min(value, limit.per_minute or value), _USER)
                self._probing = False

    @property
    def limits(self) -> tuple[float | None, float | None]:
        """The request and token limits a minute now in force (None: not known)."""
        return self.requests.per_minute, self.tokens.per_minute

    def _factor(self, now: float) -> float:
        return min(1.0, self._factor_cut + _RECOVERY * (now - self._cut_at))

    def _rate(self, limit: _Limit, now: float) -> float | None:
        if limit.per_minute is not None:
            return limit.per_minute / 60 * self._factor(now)
        if limit is self.requests and self._free_rate is not None and self.tokens.per_minute is None:
            return self._free_rate * (1 + _RECOVERY * (now - self._cut_at))
        return None

    def delay(self, now: float, cost: int) -> float:
        """Seconds until a request of `cost` tokens may start (0 or less: now); `QuotaExhausted` if none may."""
        if self.quota_exhausted:
            raise QuotaExhausted("the account has no quota left (insufficient_quota)")
        tokens = cost * self._token_scale
        # A request pace with no request limit known is the one the 429s have set.
        paced_by = "RPM" if self.requests.per_minute is not None else "429"
        waits = [
            (self._hold_until - now, "429"),
            (self.requests.wait(now, 1, self._rate(self.requests, now), self._trusted), paced_by),
            (self.tokens.wait(now, tokens, self._rate(self.tokens, now), self._trusted), "TPM"),
        ]
        if self._probing and self._probe_at is not None:
            waits.append((self._probe_at + _PROBE - now, ""))
        wait, reason = max(waits, key=lambda pair: pair[0])  # on a tie, the first: a hold names its 429
        if wait <= _EPSILON:
            return 0.0  # what rounding leaves of a refill is no wait: it could never be slept out
        if reason:
            self._bound = (reason, now)
        return wait

    def start(self, now: float, cost: int) -> int:
        """Record a start that `delay` allowed; returns the ticket its answer is reported with."""
        tokens = cost * self._token_scale
        for limit, spent in ((self.requests, 1.0), (self.tokens, tokens)):
            rate = self._rate(limit, now)
            if rate:
                limit.due = max(limit.due, now - BURST) + spent / rate
            limit.spend(now, spent)
        if self._probing and self._probe_at is None:
            self._probe_at = now
        self._ticket += 1
        self._starts.append((self._ticket, now, tokens))
        while self._starts and self._starts[0][1] < now - _SPAN:
            self._starts.popleft()
        return self._ticket

    def _observe(self, now: float, ticket: int, headers: Mapping[str, str]) -> None:
        """Learn from `x-ratelimit-*` headers; take the starts since `ticket` off the reported remaining."""
        later: list[float] = []  # the tokens of each start after `ticket`
        own: float | None = None  # the tokens of `ticket` itself; None if it is too old to place
        for entry, _, tokens in reversed(self._starts):
            if entry <= ticket:
                own = tokens if entry == ticket else None
                break
            later.append(tokens)
        for limit, suffix in ((self.requests, "requests"), (self.tokens, "tokens")):
            limit.learn(header_number(headers.get(f"x-ratelimit-limit-{suffix}")), _HEADERS)
            remaining = header_number(headers.get(f"x-ratelimit-remaining-{suffix}"))
            if remaining is None or own is None or ticket < limit.seen:
                continue
            reset = duration_seconds(headers.get(f"x-ratelimit-reset-{suffix}", "")) or 0.0
            mine, spent = (1.0, float(len(later))) if limit is self.requests else (own, sum(later))
            # The server counted this request before it reported what remains: the bucket holds at least both.
            limit.seen, limit.ceiling, limit.reset_at = ticket, max(limit.ceiling, remaining + mine), now + reset
            # When the server counted it is not known (after it started, by a loaded server's delay; perhaps as
            # late as it answered): the report is taken as of now, less every later start, with no refill since.
            limit.level, limit.level_at = remaining - spent, now
            if remaining <= 0 and limit.per_minute is None:
                self._hold(now, reset)

    def _hold(self, now: float, seconds: float) -> None:
        self._hold_until = max(self._hold_until, now + min(max(seconds, 0.0), _MAX_HOLD))
        # The catch-up allowance is for late wake-ups, not for the time held: after a hold, one at a time.
        for limit in (self.requests, self.tokens):
            limit.due = max(limit.due, self._hold_until + BURST)

    def _answered(self, now: float) -> None:
        self._probing = False
        if self._first_answer is None:
            self._first_answer = now

    def on_answer(self, now: float, ticket: int, headers: Mapping[str, str]) -> None:
        """An answer other than a 429 (a 5xx is an answer too: the limiter let it through)."""
        self._answered(now)
        self._in_row = 0
        self._accepted.append(now)
        recent = self._recent(now)
        if self._first_answer is not None and now - self._first_answer >= _WINDOW:
            self._peak = max(self._peak, recent)
        self._observe(now, ticket, headers)

    def on_refused(self, now: float, ticket: int, cost: int, refusal: Refusal, headers: Mapping[str, str]) -> None:
        """A 429: learn what it says, cut the pace, and hold every new start until its retry time."""
        if refusal.quota:
            self.quota_exhausted = True
            return
        self._answered(now)
        self._in_row += 1
        self._trusted = False
        self._refusals.append(now)
        self._observe(now, ticket, headers)
        limit = self.tokens if refusal.dimension == "tokens" else self.requests
        if refusal.dimension is not None:
            limit.learn(refusal.limit, _MESSAGE)
        if refusal.dimension == "tokens" and refusal.requested:
            # Our prompt estimate runs short of the server's count: scale every later estimate up to it.
            self._token_scale = min(2.0, max(self._token_scale, refusal.requested / max(cost, 1)))
        if now - self._cut_at >= _WINDOW:
            self._cut(now)
        retry = refusal.retry_after
        if retry is None:
            rate = self._rate(limit, now)
            spent = cost * self._token_scale if limit is self.tokens else 1.0
            # No word on when: long enough for the refused request's share to refill, and longer each time in a row.
            retry = max(spent / rate if rate else 0.0, min(8.0, 0.25 * 2.0 ** (self._in_row - 1)))
        self._hold(now, retry)

    def _cut(self, now: float) -> None:
        if self.requests.per_minute is not None or self.tokens.per_minute is not None:
            self._factor_cut = max(_FLOOR, self._factor(now) * _CUT)
        else:
            # What the server has been admitting: the starts of the last window less its refusals, which come
            # back at once (answers lag by their latency). Early in a run, over the time actually seen.
            first = self._starts[0][1] if self._starts else now
            seen = min(_WINDOW, max(now - first, 0.05))
            while self._refusals and self._refusals[0] < now - _WINDOW:
                self._refusals.popleft()
            starts = sum(1 for _, at, _ in self._starts if at >= now - _WINDOW)
            admitted = max(0, starts - len(self._refusals)) / seen
            # Refusals that count against the limit can starve a client of every admission: then halve.
            halved = self._rate(self.requests, now) or 0.0
            self._free_rate = max(1.0, _CUT * admitted, halved / 2, _FLOOR * self._peak / _WINDOW)
        self._cut_at = now

    def on_lost(self, now: float) -> None:
        """A request that got no answer (timeout, dropped connection): it no longer holds back the others."""
        self._probe_at = None

    def _recent(self, now: float) -> int:
        while self._accepted and self._accepted[0] < now - _WINDOW:
            self._accepted.popleft()
        return len(self._accepted)

    def status(self, now: float) -> Pace:
        """Starts per second over the last few seconds, and the limit that delayed a start most recently."""
        starts = [at for _, at, _ in self._starts if at >= now - _SPAN]
        span = min(_SPAN, now - starts[0]) if starts else 0.0
        rate = len(starts) / span if span > 0 else 0.0
        bound = self._bound[0] if self._bound and now - self._bound[1] <= _BOUND_FOR else None
        return Pace(rate, bound)


class Gate:
    """The async layer on a `Pacer`: starts go in arrival order, each when the pacer allows it.

    Only the first waiter sleeps; an answer wakes it to look again, since an answer can move its start
    either way. Loop-bound pieces are made per running loop, as `client.Budget` makes its semaphore.
    """

    def __init__(self, pacer: Pacer | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.pacer = pacer or Pacer()
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._lock, self._changed = loop, asyncio.Lock(), asyncio.Event()

    async def start(self, cost: int) -> int:
        """Wait until a request of `cost` tokens may start and record its start; returns its ticket."""
        self._bind()
        async with self._lock:
            while True:
                now = self._clock()
                delay = self.pacer.delay(now, cost)
                if delay <= 0:
                    return self.pacer.start(now, cost)
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), delay)

    def _notify(self) -> None:
        if self._loop is not None:
            self._changed.set()

    def answered(self, ticket: int, headers: Mapping[str, str]) -> None:
        """Report an answer other than a 429."""
        self.pacer.on_answer(self._clock(), ticket, headers)
        self._notify()

    def refused(self, ticket: int, cost: int, body: bytes, headers: Mapping[str, str]) -> Refusal:
        """Report a 429 and return what it said; `QuotaExhausted` if it says the account has no quota left."""
        refusal = read_refusal(body, headers)
        self.pacer.on_refused(self._clock(), ticket, cost, refusal, headers)
        self._notify()
        if refusal.quota:
            raise QuotaExhausted("the account has no quota left (insufficient_quota)")
        return refusal

    def lost(self) -> None:
        """Report a request that got no answer."""
        self.pacer.on_lost(self._clock())
        self._notify()

    def status(self) -> Pace:
        """The pace now, for the progress bar."""
        return self.pacer.status(self._clock())
