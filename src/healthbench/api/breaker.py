"""Whether one server of a pool takes requests now: a circuit breaker over what its attempts met.

A pool of judge servers (several base URLs for one model) survives a server that dies or sickens: the server is
taken out, what it had in flight goes to the others, and it is tried again after a while. What takes it out:

- a connection it refuses or cannot make (`Kind.UNREACHABLE`): a server that is down, at once;
- connections it closes or requests it does not answer in time (`DROPPED`, `NO_ANSWER`), `OUT_AFTER_DROPS` in a
  row: one reset may be a blip, two are a server going away;
- server errors and answers that are not the API's (`SERVER_ERROR`, `UNREADABLE`), `OUT_AFTER_ERRORS` in a row;
- what no wait cures (a refused key or model, no such host: `Rule.unusable`), and a server none of whose first
  calls got a usable answer (`retrying.Health`): held out for `VERDICT_HOLDS`, as a single endpoint's verdict is.

Any usable answer (or a refusal of a prompt, which shows the server works) resets the counts. An out server is
tried again after its cool-down (`FIRST_COOL_DOWN` seconds, doubling to `LONGEST_COOL_DOWN` while it keeps failing):
one request, a trial, goes to it alone; answered, the server is back in; failed, out again for twice as long.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from healthbench.api.retrying import VERDICT_HOLDS, Failure, Kind

OUT_AFTER_DROPS = 2
OUT_AFTER_ERRORS = 5
FIRST_COOL_DOWN = 2.0
"""Seconds an out server waits before its first trial: long enough that a restart has begun, short enough that
a server back soon loses the pool little."""
LONGEST_COOL_DOWN = 60.0

_DROPS = frozenset({Kind.DROPPED, Kind.NO_ANSWER})
_ERRORS = frozenset({Kind.SERVER_ERROR, Kind.UNREADABLE})


class State(enum.Enum):
    """Where a server stands."""

    IN = "in"
    OUT = "out"
    TRIAL = "on trial"  # its cool-down is over and one request is out to it


class Breaker:
    """One server's circuit breaker: see the module docstring. Its transitions return whether the server just left
    or came back, for the one line that says so."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.state = State.IN
        self.cause = ""  # why it is out, in words
        self._clock = clock
        self._drops = 0
        self._errors = 0
        self._cool_down = FIRST_COOL_DOWN
        self.back_at = 0.0  # when an out server may be tried again

    def open(self, now: float | None = None) -> bool:
        """Whether a request may go to this server now (an out server's trial included)."""
        if self.state is State.IN:
            return True
        return self.state is State.OUT and (now if now is not None else self._clock()) >= self.back_at

    def sent(self) -> None:
        """A request goes to this server: the trial, if it is out."""
        if self.state is State.OUT:
            self.state = State.TRIAL

    def answered(self) -> bool:
        """A usable answer, or one that shows the server works; True if it brings the server back."""
        self._drops = 0
        self._errors = 0
        if self.state is State.IN:
            return False
        self.state = State.IN
        self._cool_down = FIRST_COOL_DOWN
        self.cause = ""
        return True

    def abandoned(self) -> None:
        """A request sent to this server ended with no outcome (cancelled): if it was the trial, another may go."""
        if self.state is State.TRIAL:
            self.state = State.OUT

    def failed(self, failure: Failure, *, lasting: bool = False) -> bool:
        """An attempt failed as `failure` says (`lasting`: what no wait cures, or the first-calls verdict); True if
        this takes the server out."""
        if not self.counts(failure) and not lasting:
            return False
        if self.state is State.TRIAL:
            return self._out(failure, max(self._cool_down * 2, VERDICT_HOLDS if lasting else 0.0))
        if self.state is State.OUT:
            return False  # one of those sent before it went out: it is out already
        self._drops = self._drops + 1 if failure.kind in _DROPS else 0
        self._errors = self._errors + 1 if failure.kind in _ERRORS else 0
        if lasting:
            return self._out(failure, VERDICT_HOLDS)
        if failure.kind is Kind.UNREACHABLE or self._drops >= OUT_AFTER_DROPS or self._errors >= OUT_AFTER_ERRORS:
            return self._out(failure, FIRST_COOL_DOWN)
        return False

    @staticmethod
    def counts(failure: Failure) -> bool:
        """Whether a failure tells against the server (else it answered: a refusal of this request, a limit, content
        the caller cannot use)."""
        return failure.kind is Kind.UNREACHABLE or failure.kind in _DROPS or failure.kind in _ERRORS

    def _out(self, failure: Failure, cool_down: float) -> bool:
        self.state = State.OUT
        self.cause = failure.cause
        self._cool_down = min(LONGEST_COOL_DOWN, cool_down)
        self.back_at = self._clock() + self._cool_down
        self._drops = 0
        self._errors = 0
        return True

    @property
    def cool_down(self) -> float:
        """Seconds an out server waits, from when it went out, before its trial."""
        return self._cool_down
