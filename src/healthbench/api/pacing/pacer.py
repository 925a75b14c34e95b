"""What one process sees of a key's rate limits, and what it makes of it: the `Effects` the shared pace applies.

OpenAI limits requests and tokens per minute, perhaps over shorter windows; it counts a request's tokens on
arrival as its prompt plus its output cap, and it counts refused requests too, so a client that sends into
a spent limit spends the budget it is waiting for. Starts are therefore paced (`state`, below the limit)
before the server has to refuse anything, and, where the server reports what remains, kept under a mirror of
its bucket, which counts a debt the report shows (nothing remaining, and a longer wait until the bucket is full
than its size takes). In a process of its own the mirror also lets starts run ahead of the pace while it shows
room past a quarter of the bucket (so a run spends the bucket's burst allowance once, and keeps the rest to
absorb jitter) until the server refuses a request it said would fit; from then on, and always when the pace is
shared, starts keep to the pace.

Limits come from the user, else from the `x-ratelimit-*` headers, else from the numbers in a 429's message. A 429
that names a limit (its message's numbers, the headers, or a limiter's own hint on when its bucket has room:
`retry-after-ms`, "try again in") holds every start until its retry time and cuts the pace. Retry hints run short on
some limiters (computed before the refused request itself is counted): a request that waited a whole hold and is
refused again pads every later hint, up to threefold, and by the refused request's own share of the pace. A hint in
whole seconds may overstate the limiter's wait by up to a second, which the pace may leave out of the hold
(`state`); a start refused again after a hold left that short has such hints taken whole until a start after a hold
goes through. A 429 that names nothing (a bare `Retry-After` at most) is judged by the share of the last window's
starts refused: a few percent is noise (the refused request alone waits its hint, and a pace in force is cut
gently); more is a limit. The last limit's 429 is kept (`Refused`), beside this process's starts, for `siblings` to
tell whether another key's starts spend that limit too. Until the first answer arrives at most `FIRST_WINDOW`
requests are out, unless a limit is known already (or the slow start is skipped: `skip_slow_start`); until a limit is
known, two more for each answer (a slow start). `insufficient_quota` is no limit to wait for: `QuotaExhausted`, at once.

The model is pure: every method takes the time `now` of a monotonic clock. `gate.Gate` runs it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from healthbench.api.failures import RateLimited
from healthbench.api.pacing.state import (
    BURST,
    EPSILON,
    HEADERS,
    MESSAGE,
    WINDOW,
    Admission,
    Ahead,
    Dimension,
    Effects,
    Learned,
    Slowdown,
)
from healthbench.api.ratesignals import duration_seconds, header_number
from healthbench.errors import QuotaExhausted

_PROBE = 5.0  # seconds without an answer after which the probe's window no longer holds starts back
_GROW = 2  # requests the probe's window grows by with each answer: threefold each round trip
# Requests a key nothing is known of may have out before its first answer, as TCP's initial window (RFC 6928): a
# window of one cost a 200 ms grader's run of 5,965 calls about 0.35 s more than ten (one and a half round trips of
# the slow start), and twenty about 0.1 s less than ten (the slow start's rounds, 20-60-100 in flight in place of
# 10-30-90-100). Over three seeds of the pace's simulation every row of both matrices did as well or better with
# twenty by its lowest seed; the most refused, on the 1 s fixed window with late 429s, went from 2.4% to 2.8%.
FIRST_WINDOW = 20
_BOUND_FOR = 1.0  # a limit that delayed a start this recently still binds
_SPAN = 5.0  # seconds of starts kept: the reported pace, and the share of them refused
# A window's refused share up to this much over the usual share is noise, once the window has this many starts;
# the usual share follows the windows' shares, so a steady rate of limitless 429s is never taken for a limit.
_NOISE, _SAMPLE, _USUAL, _USUAL_MAX = 0.08, 20, 0.5, 0.1
_PAD_UP, _PAD_MAX, _PAD_DECAY, _PAD_MARGIN = 1.5, 3.0, 0.9, 0.01  # learning that retry hints run short
_MARGIN, _EWMA = 1.5, 0.05  # Little's law: in flight = rate x latency x margin; the averages' weight
# A trusted report's room past this share of the bucket may be spent ahead of the pace, up to _AHEAD seconds of it.
_CUSHION, _AHEAD = 0.25, 0.75


@dataclass(frozen=True)
class Refused:
    """A limit's 429 of this key: when it came, when the refused request started, the limit's dimension and size a
    minute (named by the 429, else the only one in force), and whether other processes pace the key too (through a
    store: this process sees only its own starts of it)."""

    at: float
    started: float
    dimension: Dimension
    per_minute: float
    shared: bool


@dataclass(frozen=True)
class Pace:
    """What the progress bar shows: request starts per second lately, and the limit that holds them back."""

    rate: float
    binding: str | None  # "RPM", "TPM", "429" (held after a refusal), or None: not limit-bound

    def __str__(self) -> str:
        return f"{self.rate:.0f} req/s" + (f", {self.binding}-bound" if self.binding else "")


class _Mirror:
    """The server's bucket of one limit, as last reported and replayed with the starts since."""

    def __init__(self) -> None:
        self.per_minute: float | None = None
        self.level: float | None = None
        self.level_at = 0.0
        self.seen = -1  # ticket of the answer that last reported `remaining`
        self.ceiling = 0.0  # the most ever reported remaining: the bucket's size, as far as is known
        self.reset_at = 0.0

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

    def wait(self, now: float, cost: float, trusted: bool) -> tuple[float, float]:
        """Seconds until a start of `cost` fits the mirrored budget, and how many seconds of the pace it may run
        ahead of it: `BURST`, or more while a trusted mirror of a known limit shows room past `_CUSHION` of the
        bucket (the server's burst allowance, spent once, never the cushion that absorbs the jitter)."""
        level = self.refilled(now)
        if level is None:
            return 0.0, BURST
        ahead = BURST
        if trusted and self.per_minute:
            spare = level - cost - _CUSHION * self.ceiling
            ahead += min(_AHEAD, max(0.0, spare / (self.per_minute / 60)))
        need = min(cost, self.ceiling)
        if level >= need:
            return 0.0, ahead
        return ((need - level) / (self.per_minute / 60) if self.per_minute else self.reset_at - now), ahead


class Pacer:
    """One process's view of one key's limits: see the module docstring. Not thread-safe.

    `shared`: the pace is shared with other processes, so the mirror never lets a start run ahead of it.
    """

    def __init__(self, shared: bool = False) -> None:
        self.mirrors: dict[Dimension, _Mirror] = {"requests": _Mirror(), "tokens": _Mirror()}
        self.quota_exhausted = False
        # The server's reported budget is followed until it refuses a request the mirror said would fit: then
        # its reports are read some other way than this model reads them, and only the pace is trusted.
        self._trusted = not shared
        # Until a limit is known, requests in flight grow from FIRST_WINDOW by _GROW for each answer (threefold each
        # round trip, as TCP's slow start doubles): a limit that the first answers did not name is then met by a
        # burst a few times what it let through, not by the whole concurrency at once.
        self._probing = True
        self._probe_at: float | None = None  # the first start, then the last answer
        self._window = FIRST_WINDOW
        self._in_row = 0
        self._token_scale = 1.0
        self._ticket = 0
        # (ticket, time, tokens, tokens of every start before it), for replay and pace: tickets run on by one, so
        # an answer finds its start by index and the starts since by difference, whatever is in flight.
        self._starts: deque[tuple[int, float, float, float]] = deque()
        self._tokens_started = 0.0  # the tokens of every start so far
        self._open: dict[int, float] = {}  # start times of the requests in flight
        self._refusals: deque[float] = deque()  # limitless 429s, for the share of a window refused
        self._usual, self._usual_at = 0.0, 0.0  # the share of starts refused for no limit, as usual lately
        self._round_at = -math.inf  # when the last hold began: the refusals of earlier starts are of its round
        self._published: dict[Dimension, tuple[float, int]] = {}
        self._held_until: float | None = None  # the end of the last hold seen, until a start goes after it
        self._after_hold: int | None = None  # the ticket of that start: did it wait long enough?
        self.pad = 1.0
        self.short = False  # whether a retry hint has been seen to run short
        # When the last hint in whole seconds would have ended its hold, had the pace not left it shorter, and
        # whether such hints are taken whole for now: a start after a hold left shorter was refused again.
        self._hint_until = -math.inf
        self._whole = False
        self._bound: tuple[str, float] | None = None
        self._view = Admission(0.0, None)
        self._latency: float | None = None
        self._tokens: float | None = None
        self.refused_by: Refused | None = None  # the last 429 of a limit (`siblings` reads it)
        self._first_start: float | None = None

    @property
    def limits(self) -> tuple[float | None, float | None]:
        """The request and token limits a minute in force, as the pace last said (None: not known)."""
        return self._view.rpm, self._view.tpm

    def adopt(self, now: float, admission: Admission) -> None:
        """What the pace says is in force: limits known (by anyone sharing it) end the probe."""
        self._view = admission
        for mirror, limit in zip(self.mirrors.values(), (admission.rpm, admission.tpm), strict=True):
            # The mirror refills at the server's own limit where its headers gave one, else at the limit in force.
            if mirror.per_minute is None:
                mirror.per_minute = limit
        if admission.rpm is not None or admission.tpm is not None:
            self._probing = False
        if admission.reason == "429" and admission.wait > 0:
            self._held(now + admission.wait)

    def skip_slow_start(self) -> None:
        """Let starts go at once while no limit is known, as after a 429: the pace and the budget hold them."""
        self._probing = False

    def scaled(self, cost: int) -> float:
        """A request's tokens as the server counts them, as far as its 429s have said."""
        return cost * self._token_scale

    def delay(self, now: float, cost: int) -> tuple[float, str | None, Ahead]:
        """What this process alone holds a start of `cost` back for: seconds to wait (0 or less: none), why, and
        how many seconds of each pace the start may run ahead of it. `QuotaExhausted` if no start may go."""
        if self.quota_exhausted:
            raise QuotaExhausted()
        wait, reason, ahead = 0.0, None, [BURST, BURST]
        for index, (mirror, spent, name) in enumerate(self._each(cost)):
            mirror_wait, ahead[index] = mirror.wait(now, spent, self._trusted)
            if mirror_wait > wait:
                wait, reason = mirror_wait, name
        probe = self._probe_at
        if self._probing and probe is not None and len(self._open) >= self._window and probe + _PROBE - now > wait:
            wait, reason = probe + _PROBE - now, None
        return (wait if wait > EPSILON else 0.0), reason, (ahead[0], ahead[1])

    def _each(self, cost: int) -> tuple[tuple[_Mirror, float, str], ...]:
        """Each limit's mirror, what a start of `cost` spends of it, and the limit's name."""
        return (self.mirrors["requests"], 1.0, "RPM"), (self.mirrors["tokens"], self.scaled(cost), "TPM")

    def bound(self, now: float, reason: str | None) -> None:
        """A start was held back for `reason`: the progress bar names it for a while."""
        if reason:
            self._bound = (reason, now)

    def start(self, now: float, cost: int) -> int:
        """Record a start that the pace allowed; returns the ticket its answer is reported with."""
        tokens = self.scaled(cost)
        for mirror, spent, _ in self._each(cost):
            mirror.spend(now, spent)
        if self._probing and self._probe_at is None:
            self._probe_at = now
        self._ticket += 1
        if self._first_start is None:
            self._first_start = now
        if self._held_until is not None and now >= self._held_until:
            self._held_until, self._after_hold = None, self._ticket
        self._starts.append((self._ticket, now, tokens, self._tokens_started))
        self._tokens_started += tokens
        self._open[self._ticket] = now
        self._tokens = tokens if self._tokens is None else self._tokens + _EWMA * (tokens - self._tokens)
        while self._starts and self._starts[0][1] < now - _SPAN:
            self._starts.popleft()
        return self._ticket

    def _held(self, until: float) -> None:
        self._held_until = max(self._held_until or until, until)

    def _learn(self, dimension: Dimension, per_minute: float | None, rank: int) -> list[Learned]:
        """A limit to publish, unless it is what this process published last (answers repeat their headers)."""
        if per_minute is None or per_minute <= 0 or self._published.get(dimension) == (per_minute, rank):
            return []
        self._published[dimension] = (per_minute, rank)
        return [Learned(dimension, per_minute, rank)]

    def _since(self, ticket: int) -> tuple[float | None, int, float]:
        """The tokens of `ticket`'s start (None if it is too old to place), and how many starts came after it and
        their tokens."""
        if not self._starts or ticket < self._starts[0][0]:
            return None, 0, 0.0
        _, _, tokens, before = self._starts[ticket - self._starts[0][0]]
        return tokens, self._ticket - ticket, self._tokens_started - before - tokens

    def _observe(self, now: float, ticket: int, headers: Mapping[str, str]) -> Effects:
        """Learn from `x-ratelimit-*` headers; take the starts since `ticket` off the reported remaining."""
        own, later, later_tokens = self._since(ticket)
        learned: list[Learned] = []
        hold: float | None = None
        for dimension, mirror in self.mirrors.items():
            size = header_number(headers.get(f"x-ratelimit-limit-{dimension}"))
            if size is not None and size > 0:
                mirror.per_minute = size
            learned += self._learn(dimension, size, HEADERS)
            remaining = header_number(headers.get(f"x-ratelimit-remaining-{dimension}"))
            if remaining is None or own is None or ticket < mirror.seen:
                continue
            reset = duration_seconds(headers.get(f"x-ratelimit-reset-{dimension}", "")) or 0.0
            mine, spent = (1.0, float(later)) if dimension == "requests" else (own, later_tokens)
            # The server counted this request before it reported what remains: the bucket holds at least both.
            mirror.seen, mirror.ceiling, mirror.reset_at = ticket, max(mirror.ceiling, remaining + mine), now + reset
            if remaining <= 0 and mirror.per_minute:
                # Nothing left may be a debt (refused requests that counted): the remaining reads 0, but the time
                # until the bucket is full again counts it. At most a bucket's worth: the bucket's size is a guess.
                debt = mirror.ceiling - reset * mirror.per_minute / 60
                remaining = max(-mirror.ceiling, min(remaining, debt))
            # When the server counted it is not known (after it started, by a loaded server's delay; perhaps as
            # late as it answered): the report is taken as of now, less every later start, with no refill since.
            mirror.level, mirror.level_at = remaining - spent, now
            if remaining <= 0 and mirror.per_minute is None:
                hold = reset
        return Effects(tuple(learned), hold)

    def on_answer(self, now: float, ticket: int, headers: Mapping[str, str]) -> Effects:
        """An answer other than a 429 (a 5xx is an answer too: the limiter let it through)."""
        if self._probing:
            self._window, self._probe_at = self._window + _GROW, now
        self._in_row = 0
        started = self._open.pop(ticket, None)
        if started is not None:
            latency = now - started
            self._latency = latency if self._latency is None else self._latency + _EWMA * (latency - self._latency)
        if ticket == self._after_hold:  # the first start after a hold went through: the hints are long enough
            self.pad, self._after_hold, self._whole = max(1.0, self.pad * _PAD_DECAY), None, False
        return self._observe(now, ticket, headers)

    def on_refused(
        self, now: float, ticket: int, cost: int, refusal: RateLimited, headers: Mapping[str, str]
    ) -> tuple[Effects, float | None]:
        """A 429: what it changes in the pace, and how long this request itself waits before it is asked again
        (0: at once, through the pace, which holds it; None: the retry table's backoff)."""
        if refusal.quota:
            self.quota_exhausted = True
            return Effects(), 0.0
        self._probing = False
        started = self._open.pop(ticket, now)
        seen = self._observe(now, ticket, headers)
        learned = list(seen.learned)
        if refusal.dimension is not None:
            learned += self._learn(refusal.dimension, refusal.limit, MESSAGE)
        if refusal.dimension == "tokens" and refusal.requested:
            # Our prompt estimate runs short of the server's count: scale every later estimate up to it.
            self._token_scale = min(2.0, max(self._token_scale, refusal.requested / max(cost, 1)))
        named = refusal.dimension is not None or refusal.hinted or self._spent(cost, headers)
        share, excess, limit = self._judge(now, named)
        if not limit:
            # Noise (a gateway's "slow down", another tenant's burst): this request waits, the others go on.
            return Effects(tuple(learned), seen.hold, Slowdown(excess, hard=False)), refusal.retry_after
        if started >= self._round_at:  # a new round of refusals, not one more of a burst already answered for
            self._in_row += 1
            self._round_at = now
        self._trusted = False
        self.refused_by = self._refused_by(now, started, refusal) if named else None
        if named and ticket == self._after_hold and started < self._hint_until:
            # It waited out a hold left shorter than a hint in whole seconds and was refused: not the hint ran
            # short, the hold did. Such hints are taken whole until a start after a hold goes through.
            self._after_hold, self._whole = None, True
        elif named and ticket == self._after_hold:  # it waited out a whole hold and was refused again
            self.pad, self._after_hold, self.short = min(_PAD_MAX, self.pad * _PAD_UP), None, True
        rate = self._view.token_rate if refusal.dimension == "tokens" else self._view.request_rate
        spent = self.scaled(cost) if refusal.dimension == "tokens" else 1.0
        own = spent / rate if rate else 0.0  # the refused request's own share of the pace, in seconds
        retry = refusal.retry_after
        # A hint in whole seconds (no retry-after-ms, none finer in the message) is rounded up: the limiter's wait
        # may be up to a second shorter.
        coarse = retry is not None and retry >= 1 and retry.is_integer() and headers.get("retry-after-ms") is None
        coarse = coarse and not self._whole
        if retry is not None:
            # A hint that ran short was worked out before the refused request itself was counted: from then on
            # every hint is padded, by that request's share as well as by a factor.
            retry = retry * self.pad + max(_PAD_MARGIN, own if self.short else 0.0)
        else:
            # No word on when: long enough for the refused request's share to refill, longer each time in a row.
            retry = max(own, 0.25 * 2.0 ** min(self._in_row - 1, 5))  # 8 s at most
        overstated = 1.0 if coarse else 0.0
        self._hint_until = now + retry if coarse else -math.inf
        self._held(now + retry - overstated)  # the shortest hold the pace may make of it: its first start is judged
        hold = max(retry, seen.hold or 0.0)
        return Effects(tuple(learned), hold, Slowdown(share, hard=True), overstated if hold == retry else 0.0), 0.0

    def _refused_by(self, now: float, started: float, refusal: RateLimited) -> Refused | None:
        """A limit's 429 of a request started at `started`, as `Refused`; None if it names no limit and more or
        fewer than one is in force."""
        view = self._view
        dimension = refusal.dimension
        if dimension is None and (view.rpm is None) != (view.tpm is None):
            dimension = "requests" if view.rpm is not None else "tokens"
        size = None if dimension is None else refusal.limit or (view.rpm if dimension == "requests" else view.tpm)
        if dimension is None or not size:
            return None
        return Refused(now, started, dimension, size, view.sharers > 1)

    def started_between(self, since: float, until: float, dimension: Dimension) -> float:
        """This process's starts from `since` up to `until` (the last `_SPAN` seconds at most): how many, or their
        tokens."""
        starts = (tokens for _, at, tokens, _ in self._starts if since <= at < until)
        return sum(1.0 if dimension == "requests" else tokens for tokens in starts)

    def started_alone(self, now: float, per_minute: float, dimension: Dimension) -> float:
        """This process's starts since its first (how many, or their tokens), as a share of what a limit of
        `per_minute` lets through since then at the most: its rate, and a window's worth it starts with. At 1 or
        more the key alone may have run a limit of that size into debt."""
        if self._first_start is None:
            return 0.0
        started = float(self._ticket) if dimension == "requests" else self._tokens_started
        return started / (per_minute / 60 * (now - self._first_start + WINDOW))

    def _spent(self, cost: int, headers: Mapping[str, str]) -> bool:
        """Whether a 429's headers say a limit had too little left for the request (then it is that limit; a 429
        whose headers show plenty left is someone else's: a gateway's, an overloaded upstream's)."""
        for (mirror, spent, _), dimension in zip(self._each(cost), self.mirrors, strict=True):
            remaining = header_number(headers.get(f"x-ratelimit-remaining-{dimension}"))
            if remaining is not None and remaining < min(spent, mirror.ceiling or spent):
                return True
        return False

    def _judge(self, now: float, named: bool) -> tuple[float, float, bool]:
        """The share of the last window's starts refused, how much of it is more than usual, and whether the
        429s are a limit, not noise."""
        if named:
            return 1.0, 1.0, True
        self._refusals.append(now)
        while self._refusals[0] < now - WINDOW:
            self._refusals.popleft()
        refused = len(self._refusals)
        starts = max(refused, sum(1 for _, at, _, _ in self._starts if at >= now - WINDOW))
        share = refused / starts
        excess = max(0.0, share - self._usual)
        if starts < _SAMPLE:  # too few starts to judge by share: only a clear majority
            return share, excess, refused >= 4 and share > 0.5
        limit = excess > _NOISE
        if not limit and now - self._usual_at >= WINDOW:
            # Windows with no 429 at all were usual too: they count as refusing none.
            quiet = min(20, int((now - self._usual_at) / WINDOW) - 1)
            usual = self._usual * (1 - _USUAL) ** quiet
            self._usual = min(_USUAL_MAX, usual + _USUAL * (share - usual))
            self._usual_at = now
        return share, excess, limit

    def on_lost(self, now: float, ticket: int) -> None:
        """A request that got no answer (timeout, dropped connection): it no longer holds back the others."""
        self._probe_at = None
        self._open.pop(ticket, None)

    def in_flight_needed(self) -> int | None:
        """Requests in flight the pace in force needs (Little's law: its rate times the latency seen, with a
        margin); None while no limit is known, or nothing has been answered."""
        view = self._view
        rates = [view.request_rate]
        if view.token_rate is not None and self._tokens:
            rates.append(view.token_rate / self._tokens)
        known = [rate for rate in rates if rate is not None]
        if (view.rpm is None and view.tpm is None) or not known or self._latency is None:
            return None
        return math.ceil(min(known) * self._latency * _MARGIN)

    def status(self, now: float) -> Pace:
        """Starts per second over the last few seconds, and the limit that delayed a start most recently."""
        starts = [at for _, at, _, _ in self._starts if at >= now - _SPAN]
        span = min(_SPAN, now - starts[0]) if starts else 0.0
        rate = len(starts) / span if span > 0 else 0.0
        bound = self._bound[0] if self._bound and now - self._bound[1] <= _BOUND_FOR else None
        return Pace(rate, bound)
