"""The part of one key's pace that every process using the key must share, behind one small interface.

What is shared: each limit's size (requests and tokens a minute) and where it came from, the pace of each
(GCRA: a theoretical arrival time that every start pushes on by its cost over the rate), a 429's hold, the
factor a 429 cuts the pace by, and, with no limit known, the request rate the 429s have allowed. What a
process sees for itself (the server's reported budget, probing, tickets, when a 429 is noise) stays in
`pacer.Pacer`, which turns it into `Effects` that the state applies, and into how far ahead of the pace a
start may run (`BURST`, or more while the server's own report shows room to spare).

A known limit is paced at `HEADROOM` of itself, never at it: the server's bucket then stays nearly full, and
the jitter of starts, answers and clocks is absorbed by it instead of refused (where refusals count, each one
would cost a request of the budget the run is waiting for, and one refusal near an empty bucket begets more).

`PaceState` is the interface: `admit` a start, `apply` effects. `LocalPace` implements it in this process,
as a pure model on an injected clock; `store.RedisPace` implements the same rules in Redis, as Lua scripts on
Redis's clock, so several processes (replicas, parallel runs, other machines) pace one key together.

A 429's cut of the pace regrows multiplicatively. A limit's 429 that comes while the starts keep to the pace (the
start rate over the last second near the pace, not past it) is no rate too high: it is the jitter of arrivals
crowding a window now and then, or a window's edge. A cut by a tenth regrew to the factor refused in about five
seconds and met the same 429 again, a hold each time (a sliding one-second window with 429s 300 ms late: 84% of the
limit); such a 429 sets the factor just under the one refused instead, a top it then creeps past slowly, lower again
if it is refused at or past it. A retry hint in whole seconds ("1s", no retry-after-ms) may stand for a few
milliseconds: such a 429 at the pace (or not past the pace before a cut in the last second) holds every start a
second less than the hint, and the pace, cut, keeps the rest (held for the whole second each time, a sliding
one-second window with 429s 300 ms late reached 82.7% of the limit). After a burst past the pace the whole hint is
held: a sliding log keeps a burst's requests for a whole window. With no limit known, a cut sets a free rate from
the pace in force (the start rate, the first time), never from what the server accepted while it was held; it
regrows fast up to just under the rate that was refused, slowly past it for a while, then fast again, and is dropped
once it has doubled that. A slowdown that is noise (a few limitless 429s) cuts gently and never starts a pace that
was not there.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

Dimension = Literal["requests", "tokens"]
DIMENSIONS: tuple[Dimension, ...] = ("requests", "tokens")

# Precedence of a limit read from the server: its headers over a 429's message (a user's limit is kept apart, and
# comes first).
HEADERS, MESSAGE = 2, 1
BURST = 0.05  # seconds of pace a late start may catch up on at once (GCRA's tolerance)
HEADROOM = 0.99  # the share of a known limit the pace sends at
WINDOW = 1.0  # one overload answers many requests at once: one cut per window, for every process
CUT, FLOOR = 0.9, 0.25  # a limit's cut of the pace, and the lowest factor it reaches
GROWTH = 1.02  # the factor's regrowth per second, multiplicative
# A limit's 429 while the start rate was at the pace (between AT_PACE_MIN and AT_PACE_MAX of it) is no rate too
# high: it is the jitter of arrivals, or a window's edge. The factor goes to EDGE of the factor refused (EDGE
# squared if it was refused at or past that top before), and creeps past it by EDGE_GROWTH a second for
# EDGE_PLATEAU seconds before it regrows at GROWTH again. Such a 429 may also be another sender's, gone soon after
# (an eval's policy key beside its grader key, both counted by one organization's limit): a plateau of a minute
# kept the grader's pace at 81% of a limit it had to itself for the rest of a 26-second run (issue 47's timeline);
# after five quiet seconds it regrows, and a window's edge met again lowers the top once more.
EDGE, EDGE_GROWTH, EDGE_PLATEAU = 0.96, 1.0005, 5.0
AT_PACE_MIN, AT_PACE_MAX = 0.8, 1.02
# A free rate regrows FAST up to just under the rate that was refused, SLOW past it for PLATEAU seconds (a limit
# there refuses again soon), then FAST again (there was none: noise taken for a limit costs seconds, not the
# run); it is dropped once it has regrown to UNPACE times that rate.
FAST, SLOW, PLATEAU, UNPACE = 1.1, 1.02, 10.0, 2.0
MIN_FREE = 1.0  # requests a second: a free rate never goes below this
# Seconds the lasting start rate is counted over: a bucket hides a rate past its limit until it has drained, so
# the rate of the moment a 429 comes overstates the limit, and a free rate is set from no more than this one.
LASTING = 5.0
MAX_HOLD = 120.0
USER_TTL = 60.0  # seconds a user's limit stands in a shared pace after the last process that set it stopped
EPSILON = 1e-6  # what rounding leaves of a refill is no wait: it could never be slept out


@dataclass(frozen=True)
class Learned:
    """A limit read from the server: its dimension, its size a minute, and its source's precedence."""

    dimension: Dimension
    per_minute: float
    rank: int


@dataclass(frozen=True)
class Slowdown:
    """A 429 that slows the pace: the window's refused share, and whether it was a limit (`hard`) or noise."""

    share: float
    hard: bool


@dataclass(frozen=True)
class Effects:
    """What a process's observations change in the shared state: limits learned, a hold, a slowdown."""

    learned: tuple[Learned, ...] = ()
    hold: float | None = None  # seconds from now during which no start goes
    slow: Slowdown | None = None
    # Seconds by which the hold may overstate the limiter's own wait: a hint in whole seconds, rounded up, may stand
    # for a few milliseconds. Left out of the hold when the starts keep to a known limit's pace (see `at_pace`).
    coarse: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.learned) or self.hold is not None or self.slow is not None

    def merge(self, other: Effects) -> Effects:
        """Both at once: the longer hold (with what it may overstate), the harder slowdown, every limit learned
        (later ones last)."""
        holds = [(effects.hold, -effects.coarse) for effects in (self, other) if effects.hold is not None]
        slows = [slow for slow in (self.slow, other.slow) if slow is not None]
        slow = max(slows, key=lambda s: (s.hard, s.share)) if slows else None
        hold, coarse = max(holds) if holds else (None, -0.0)
        return Effects(self.learned + other.learned, hold, slow, -coarse)


@dataclass(frozen=True)
class Admission:
    """The state's answer to a start: go (`wait` 0), go after `wait` (`reserved`), or ask again after `wait`;
    with the pace now in force, for the process's own bookkeeping."""

    wait: float
    reason: str | None  # what holds the start back: "429", "RPM", "TPM", or None
    reserved: bool = False
    rpm: float | None = None
    tpm: float | None = None
    request_rate: float | None = None  # starts a second the pace allows now (None: unpaced)
    token_rate: float | None = None
    sharers: int = 1  # processes that used this pace lately


Limits = tuple[float | None, float | None]
Ahead = tuple[float, float]
PACED: Ahead = (BURST, BURST)


class PaceState(Protocol):
    """One key's shared pace. `shared` says whether other processes may use it too (then a process's own
    mirror of the server's budget can never decide alone: it sees only its own starts)."""

    shared: bool

    async def admit(self, tokens: float, horizon: float, ahead: Ahead, user: Limits) -> Admission:
        """Record a start of `tokens` if the pace allows it now, or within `horizon` seconds (a reservation).

        `ahead` says, per dimension, how many seconds of its pace a start may run ahead of it (`BURST`, or more
        where the server reports room to spare); `user` is this process's own setting of the limits, re-asserted
        with every start.
        """
        ...

    async def apply(self, effects: Effects) -> None:
        """Apply what a process observed."""
        ...


_REMEMBERED = 4096  # keys whose learned limits one process keeps


_LEARNED: OrderedDict[str, dict[Dimension, tuple[float, int]]] = OrderedDict()


def remembered(slot: str) -> dict[Dimension, tuple[float, int]]:
    """The limits this process has learned of one key (`slot`: its digest), as the one dict every local pace of
    the key reads and writes: the key's next client (a later run, a trainer's next step, a grader made again)
    starts at them, instead of slowly as for a key nothing is known of. The most recently used keys are kept."""
    learned = _LEARNED.pop(slot, None)
    if learned is None:
        learned = {}
    _LEARNED[slot] = learned
    while len(_LEARNED) > _REMEMBERED:
        _LEARNED.popitem(last=False)
    return learned


@dataclass
class LocalPace:
    """One key's pace in this process: the rules of `PaceState`, pure on `now` (`admit_at`, `apply_at`), and
    the async interface on `clock`. `share` is the part of each limit this process may use (a stand-in for a
    shared pace that is out of reach paces to its share of the processes last seen)."""

    clock: Callable[[], float] = time.monotonic
    shared: bool = False
    share: float = 1.0
    # Each field's name in the Lua scripts' hash is in brackets: the scripts keep the same rules on the same state.
    # The limits a minute: learned from the server [rpm, tpm, rpm_rank, tpm_rank], set by a user [rpm_user,
    # rpm_user_until, tpm_user, tpm_user_until].
    learned: dict[Dimension, tuple[float, int]] = field(default_factory=dict)
    user: dict[Dimension, tuple[float, float]] = field(default_factory=dict)  # value, and until when it stands
    # The pace: GCRA's theoretical arrival time of each dimension [tat_r, tat_t], and a 429's hold [hold].
    tat: dict[Dimension, float] = field(default_factory=lambda: dict.fromkeys(DIMENSIONS, -math.inf))
    hold_until: float = -math.inf
    # The factor 429s cut the pace by [f, f_at, f_top], and the last cuts [cut_at, eased_at].
    factor_cut: float = 1.0
    factor_at: float = 0.0
    factor_top: float = 1.0  # the factor's regrowth slows past this: just under the factor last refused at the pace
    cut_at: float = -math.inf  # the last cut for a limit
    eased_at: float = -math.inf  # the last cut for noise, which does not stop a limit's cut in the same window
    # With no limit known, the request rate the 429s allow [free, free_at, free_top, best].
    free: float | None = None
    free_at: float = 0.0
    free_top: float = 0.0
    best: float = 0.0
    # Starts a second, over a window and over LASTING seconds [sr, lr, sr_at, first].
    start_rate: float = 0.0
    lasting_rate: float = 0.0
    start_rate_at: float = 0.0
    first_start: float | None = None

    async def admit(self, tokens: float, horizon: float, ahead: Ahead, user: Limits) -> Admission:
        """`admit_at` now."""
        return self.admit_at(self.clock(), tokens, horizon, ahead, user)

    async def apply(self, effects: Effects) -> None:
        """`apply_at` now."""
        self.apply_at(self.clock(), effects)

    def limit(self, dimension: Dimension, now: float) -> float | None:
        """The limit a minute in force: a user's while one stands, else the best learned."""
        user = self.user.get(dimension)
        if user is not None and now < user[1]:
            return user[0]
        learned = self.learned.get(dimension)
        return learned[0] if learned else None

    def factor(self, now: float) -> float:
        """The share of the limits the pace uses now: cut by 429s, regrown multiplicatively (slowly past the top)."""
        elapsed = now - self.factor_at
        return min(1.0, grown(self.factor_cut, self.factor_top, elapsed, GROWTH, EDGE_GROWTH, EDGE_PLATEAU))

    def free_rate(self, now: float) -> float | None:
        """With no limit known, the request rate the 429s allow now (None: unpaced)."""
        if self.free is None:
            return None
        rate = grown(self.free, self.free_top, now - self.free_at)
        return None if rate > UNPACE * self.free_top else rate

    def rates(self, now: float) -> tuple[float | None, float | None]:
        """Starts a second and tokens a second the pace allows now (None: that dimension is unpaced)."""
        rpm, tpm = self.limit("requests", now), self.limit("tokens", now)
        factor = self.factor(now) * self.share * HEADROOM
        requests = rpm / 60 * factor if rpm else None
        if requests is None and tpm is None and (free := self.free_rate(now)) is not None:
            requests = free * self.share
        return requests, (tpm / 60 * factor if tpm else None)

    def admit_at(
        self,
        now: float,
        tokens: float,
        horizon: float = 0.0,
        ahead: Ahead = PACED,
        user: Limits = (None, None),
    ) -> Admission:
        """`PaceState.admit` at `now`."""
        for dimension, value in zip(DIMENSIONS, user, strict=True):
            if value is not None:
                self._assert_user(dimension, value, now)
        rates = self.rates(now)
        view = Admission(0.0, None, False, self.limit("requests", now), self.limit("tokens", now), *rates)
        if now < self.hold_until:
            return _with(view, self.hold_until - now, "429")
        reasons = ("RPM" if view.rpm is not None else "429", "TPM")
        wait, reason = 0.0, None
        for dimension, rate, allowed, why in zip(DIMENSIONS, rates, ahead, reasons, strict=True):
            if rate and self.tat[dimension] - allowed - now > wait:
                wait, reason = self.tat[dimension] - allowed - now, why
        if wait > max(horizon, EPSILON):
            return _with(view, wait, reason)
        at = now + max(wait, 0.0)
        for dimension, rate, spent in zip(DIMENSIONS, rates, (1.0, tokens), strict=True):
            if rate:
                self.tat[dimension] = max(self.tat[dimension], at - BURST) + spent / rate
        if self.first_start is None:
            self.first_start = at
        since = max(0.0, at - self.start_rate_at)
        self.start_rate = self.start_rate * math.exp(-since / WINDOW) + 1 / WINDOW
        self.lasting_rate = self.lasting_rate * math.exp(-since / LASTING) + 1 / LASTING
        self.start_rate_at = at
        return _with(view, wait, reason, reserved=True) if wait > EPSILON else view

    def start_rate_now(self, now: float, over: float = WINDOW) -> float:
        """Starts a second lately: an exponentially weighted count over about `over` seconds (a window, or
        `LASTING`; over the time seen, at first)."""
        rate = self.start_rate if over == WINDOW else self.lasting_rate
        decayed = rate * math.exp(-max(0.0, now - self.start_rate_at) / over)
        seen = 1 - math.exp(-max(0.0, now - (self.first_start if self.first_start is not None else now)) / over)
        return decayed / max(seen, 0.05)

    def _assert_user(self, dimension: Dimension, value: float, now: float) -> None:
        # The lowest setting of the processes seen lately stands; a higher one takes over once it lapses.
        held = self.user.get(dimension)
        if held is None or now >= held[1] or value <= held[0]:
            self.user[dimension] = (value, now + USER_TTL)

    def apply_at(self, now: float, effects: Effects) -> None:
        """`PaceState.apply` at `now`."""
        for learned in effects.learned:
            held = self.learned.get(learned.dimension)
            if learned.per_minute > 0 and (held is None or learned.rank >= held[1]):
                self.learned[learned.dimension] = (learned.per_minute, learned.rank)
        if effects.hold is not None:
            hold = effects.hold - (effects.coarse if self.at_pace(now, cut=True) else 0.0)
            self.hold_until = max(self.hold_until, now + min(max(hold, 0.0), MAX_HOLD))
            # The catch-up allowance is for late wake-ups, not for the time held: after a hold, one at a time.
            for dimension in DIMENSIONS:
                self.tat[dimension] = max(self.tat[dimension], self.hold_until + BURST)
        slow = effects.slow
        if slow is not None and now - (self.cut_at if slow.hard else max(self.cut_at, self.eased_at)) >= WINDOW:
            self._slow(now, slow)

    def at_pace(self, now: float, cut: bool = False) -> bool:
        """Whether the starts keep to a known limit's request pace: over the last second, near it, not past it
        (with `cut`, not past the pace before a cut in the last second either: a cut lowers it by a tenth at
        most, and the starts of the second before it kept to the pace then)."""
        known = self.limit("requests", now) is not None or self.limit("tokens", now) is not None
        paced = self.rates(now)[0]
        top = AT_PACE_MAX / CUT if cut and now - self.cut_at < WINDOW else AT_PACE_MAX
        return known and paced is not None and AT_PACE_MIN <= self.start_rate_now(now) / paced <= top

    def _slow(self, now: float, slow: Slowdown) -> None:
        if slow.hard:
            self.cut_at = now
        else:
            self.eased_at = now
        if self.limit("requests", now) is not None or self.limit("tokens", now) is not None:
            factor = self.factor(now)
            if slow.hard and self.at_pace(now):
                # Refused at the pace: the limiter's jitter or a window's edge, not a rate too high. A cut by a
                # tenth, regrown to the factor refused in five seconds, met it again and again (a hold each time);
                # the factor stays just under it instead.
                again = self.factor_top < 1.0 and factor >= self.factor_top
                self.factor_top = max(FLOOR, factor * (EDGE * EDGE if again else EDGE))
                self.factor_cut = self.factor_top
            else:
                self.factor_cut = max(FLOOR, factor * (CUT if slow.hard else max(CUT, 1 - slow.share / 2)))
            self.factor_at = now
            return
        current = self.free_rate(now)
        if not slow.hard:
            if self.free is not None and current is not None:  # noise never starts a pace that was not there
                # Rate and top cut alike: the regrowth goes on where it was, a little lower.
                eased = max(MIN_FREE / current, 1 - slow.share / 2)
                self.free, self.free_top = self.free * eased, self.free_top * eased
            return
        # A limit with no size known: the pace in force (the start rate, the first time) was too fast, and so,
        # perhaps, was the lasting start rate (a bucket hides a rate past its limit until it has drained).
        base = min(current if current is not None else self.start_rate_now(now), self.start_rate_now(now, LASTING))
        self.best = max(self.best, base)
        cut = base * max(0.5, CUT * (1 - slow.share))
        self.free = max(MIN_FREE, cut, FLOOR * self.best)
        # Refused again at or past the top: the top itself was too high, and comes down further.
        again = current is not None and current >= self.free_top
        self.free_top = max(self.free, base * (CUT * CUT if again else CUT))
        self.free_at = now


def grown(
    rate: float, top: float, elapsed: float, fast: float = FAST, slow: float = SLOW, plateau: float = PLATEAU
) -> float:
    """A free rate (or the factor) `elapsed` seconds after it was set at `rate`: `fast` up to `top`, `slow` past it
    for `plateau` seconds, `fast` again after."""
    elapsed = max(0.0, elapsed)
    if rate < top:
        to_top = math.log(top / rate) / math.log(fast)
        if elapsed <= to_top:
            return rate * _power(fast, elapsed)
        rate, elapsed = top, elapsed - to_top
    if elapsed <= plateau:
        return rate * _power(slow, elapsed)
    return rate * _power(slow, plateau) * _power(fast, elapsed - plateau)


def _power(base: float, exponent: float) -> float:
    # The clock is the machine's (monotonic: seconds since boot), and a state never cut measures from 0: on a machine
    # up ten hours 1.02 ** elapsed passes the largest float. Growth that far is unbounded, which every caller caps.
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.inf


def _with(view: Admission, wait: float, reason: str | None, reserved: bool = False) -> Admission:
    return Admission(wait, reason, reserved, view.rpm, view.tpm, view.request_rate, view.token_rate, view.sharers)
