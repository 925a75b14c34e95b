"""Whether one server of a pool takes requests now: a circuit breaker over what its attempts met.

A pool of judge servers (several base URLs for one model) survives a server that dies or sickens: the server is
taken out, what it had in flight goes to the others, and it is tried again after a while. What takes it out:

- a connection it refuses or cannot make (`Kind.UNREACHABLE`): a server that is down, at once;
- connections it closes or requests it does not answer in time (`DROPPED`, `NO_ANSWER`), `OUT_AFTER_DROPS` in a
  row: one reset may be a blip, two are a server going away;
- server errors and answers that are not the API's (`SERVER_ERROR`, `UNREADABLE`), `OUT_AFTER_ERRORS` in a row;
- what no wait cures (a refused key or model, no such host: `Rule.unusable`): held out for `VERDICT_HOLDS`, as a
  single endpoint's verdict is;
- answers whose content cannot be used, `UNUSABLE_SHARE` of its first `FIRST_ANSWERS` (a server without the
  reasoning parser or chat template its siblings have): held out as long, since asking again gets the same.

Any usable answer (or a refusal of a prompt, which shows the server works) resets the counts. An out server is
tried again after its cool-down (`FIRST_COOL_DOWN` seconds, doubling to `LONGEST_COOL_DOWN` while it keeps failing):
one request, a trial, goes to it alone; answered, the server is back in; failed, out again for twice as long.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from healthbench.api.retrying import FIRST_ANSWERS, UNUSABLE_SHARE, VERDICT_HOLDS, Failure, Kind

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


class Change(enum.Enum):
    """What an outcome did to a server's place in the pool: nothing, took it out, or brought it back."""

    NONE = "none"
    OUT = "out"
    BACK = "back"


class Breaker:
    """One server's circuit breaker: see the module docstring. Its transitions return what they changed (`Change`),
    for the one line that says so."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.state = State.IN
        self.cause = ""  # why it is out, in words
        self._clock = clock
        self._drops = 0
        self._errors = 0
        self._cool_down = FIRST_COOL_DOWN
        self.back_at = 0.0  # when an out server may be tried again
        self._answers = 0  # of its first `FIRST_ANSWERS` answers (since it was last taken in), those seen
        self._unusable = 0  # and those whose content could not be used
        self._by_content = False  # whether it is out for what its answers say, not for how it answered
        self.lasting = False  # whether it is out for what no wait cures: a refusal, or answers that cannot be used

    def open(self, now: float | None = None) -> bool:
        """Whether a request may go to this server now (an out server's trial included)."""
        if self.state is State.IN:
            return True
        return self.state is State.OUT and (now if now is not None else self._clock()) >= self.back_at

    def sent(self) -> None:
        """A request goes to this server: the trial, if it is out."""
        if self.state is State.OUT:
            self.state = State.TRIAL

    def answered(self) -> Change:
        """An answer that shows the server works (a usable answer, or a refusal of that request): its trial's brings
        an out server back, unless it went out for what its answers say (then `content` judges the trial's). An answer
        to a request sent before it went out changes nothing."""
        self._drops = 0
        self._errors = 0
        if self.state is not State.TRIAL or self._by_content:
            return Change.NONE
        return self._back()

    def content(self, failure: Failure | None, redact: Callable[[str], str]) -> Change:
        """An answer whose content could be used (`failure` None) or not (`failure` says why). It takes the server
        out when `UNUSABLE_SHARE` of its first `FIRST_ANSWERS` answers could not be used, and judges the trial of a
        server out for that: usable, it is back; not, out again for twice as long. `redact` takes the key out of the
        cause kept."""
        if self.state is State.TRIAL and self._by_content:
            if failure is None:
                return self._back()
            return self._out(self.cause, self._cool_down * 2)
        if self.state is not State.IN or self._answers >= FIRST_ANSWERS:
            return Change.NONE
        self._answers += 1
        self._unusable += failure is not None
        if failure is None or self._unusable < UNUSABLE_SHARE * FIRST_ANSWERS:
            return Change.NONE
        said = redact(" ".join(failure.cause.split()))
        self._by_content = True
        self.lasting = True
        return self._out(
            f"{self._unusable} of its first {self._answers} answers could not be used, the last: {said}", VERDICT_HOLDS
        )

    def _back(self) -> Change:
        self.state = State.IN
        self._cool_down = FIRST_COOL_DOWN
        self.cause = ""
        self._answers = 0
        self._unusable = 0
        self._by_content = False
        self.lasting = False
        return Change.BACK

    def abandoned(self) -> None:
        """A request sent to this server ended with no outcome (cancelled): if it was the trial, another may go."""
        if self.state is State.TRIAL:
            self.state = State.OUT

    def failed(self, failure: Failure, cause: str, *, lasting: bool = False) -> Change:
        """An attempt failed as `failure` says (`cause`: its cause as it may be shown; `lasting`: what no wait cures);
        `Change.OUT` if this takes the server out."""
        if not self.counts(failure) and not lasting:
            return Change.NONE
        if self.state is State.TRIAL:
            return self._out(cause, max(self._cool_down * 2, VERDICT_HOLDS if lasting else 0.0))
        if self.state is State.OUT:
            return Change.NONE  # one of those sent before it went out: it is out already
        self._drops = self._drops + 1 if failure.kind in _DROPS else 0
        self._errors = self._errors + 1 if failure.kind in _ERRORS else 0
        if lasting:
            self.lasting = True
            return self._out(cause, VERDICT_HOLDS)
        if failure.kind is Kind.UNREACHABLE or self._drops >= OUT_AFTER_DROPS or self._errors >= OUT_AFTER_ERRORS:
            return self._out(cause, FIRST_COOL_DOWN)
        return Change.NONE

    @staticmethod
    def counts(failure: Failure) -> bool:
        """Whether a failure tells against the server (else it answered: a refusal of this request, a limit, content
        the caller cannot use)."""
        return failure.kind is Kind.UNREACHABLE or failure.kind in _DROPS or failure.kind in _ERRORS

    def _out(self, cause: str, cool_down: float) -> Change:
        self.state = State.OUT
        self.cause = cause
        self._cool_down = min(LONGEST_COOL_DOWN, cool_down)
        self.back_at = self._clock() + self._cool_down
        self._drops = 0
        self._errors = 0
        return Change.OUT

    @property
    def cool_down(self) -> float:
        """Seconds an out server waits, from when it went out, before its trial."""
        return self._cool_down
