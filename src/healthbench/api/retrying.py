"""How a client asks again, as data: the retry policy's numbers, what each kind of failed attempt leads to (`TABLE`),
the rule that calls an endpoint unusable when none of its first calls gets a usable answer (`Health`), and one log
line per retry.

The decision follows openai-python's: 408, 409, 429 and 5xx are asked again, other statuses are not, and the
server's `x-should-retry: true` or `false` overrides the status either way; the wait doubles from 0.5 s to at most
8 s, less up to a quarter of jitter, unless the server says how long (`Retry-After`, `retry-after-ms`). Unlike
openai-python's 3 attempts, a call gets 12: a run is thousands of calls that must each succeed.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from healthbench.errors import EndpointUnusable

log = logging.getLogger("healthbench.api")

MAX_ATTEMPTS = 12
"""Attempts per call, the first included. With a quarter of requests failing, 12 leave about one chance in 60
million that a given call fails for good."""
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 8.0
JITTER = 0.25
MAX_RETRY_AFTER = 120.0
"""A longer `Retry-After` than this is not believed: the backoff applies instead."""
RETRY_STATUSES = frozenset({408, 409, 429})
"""Statuses asked again besides 5xx, as openai-python asks them."""

CUT_SHORT_ATTEMPTS = 2
"""Attempts of a call whose answers the output cap ends before they can be used (`Kind.CUT_SHORT`)."""

FIRST_CALL_ATTEMPTS = 3
FIRST_FAILURES = 8
"""An endpoint that has not yet given one usable answer is unusable once a call has failed `FIRST_CALL_ATTEMPTS`
attempts, or its calls have failed `FIRST_FAILURES` attempts in all, in a way that counts (`Rule.first_calls`):
it cannot be connected to, does not answer in time, closes the connection, answers 5xx, or answers what cannot be
read. A wrong URL, a server not started or not an API at all is far likelier than an outage that began with the
run, and the run stops in seconds (a minute or two for a hang: one timeout, then the others already out) instead of
spending every call's whole table; once an answer has been usable, every call gets the whole table."""
FIRST_ANSWERS = 16
UNUSABLE_SHARE = 0.75
"""An endpoint whose first answers cannot be used (`Kind.UNUSABLE_CONTENT`, `Kind.CUT_SHORT`: prose, a verdict that
is not a boolean, an answer the output cap ended) is unusable once `UNUSABLE_SHARE` of its first `FIRST_ANSWERS`
answers are such, counting each call's first answer only (so a run of fewer calls fails item by item, whatever the
timing of their retries): a model that does not follow the prompt's format, a thinking model whose cap ends its
thinking, a server without a reasoning parser or with the wrong chat template, fails every call the same way, and
each call's whole table of attempts would only spend a minute and the answers' cost before failing alike. An
occasional such answer is asked again, as always."""
FIRST_LIMITS = 60.0
"""Seconds an endpoint that has not answered usably yet may answer nothing but 429 before it is unusable: a key whose
limit is zero, or a gateway that refuses every request with no limit in sight, never answers however long the pace
waits, and a run that begins that way says so rather than waiting out every call's table."""
VERDICT_HOLDS = 10.0
"""Seconds an endpoint found unusable fails every call at once, without sending: what was queued behind the call
that found it sends nothing more while its run stops. After that (a server's long life), it is tried afresh."""


class Kind(enum.Enum):
    """What went wrong with one attempt."""

    NOT_A_URL = "not a URL"
    NO_SUCH_HOST = "no such host"
    UNREACHABLE = "cannot connect"
    NO_ANSWER = "no answer in time"
    DROPPED = "connection closed"
    SERVER_ERROR = "server error"
    RATE_LIMITED = "rate limited"
    UNREADABLE = "answer cannot be read"
    REFUSED_REQUEST = "request refused"
    REFUSED = "refused"
    UNUSABLE_CONTENT = "content unusable"
    CUT_SHORT = "cut by the output cap"


@dataclass(frozen=True)
class Rule:
    """What a kind of failed attempt leads to.

    `retried`: asked again within the bound (an HTTP status's is overridden by `x-should-retry`), else the call
    ends now. `unusable`: a call that ends this way (at once, or past the bound) makes the endpoint unusable, else
    the call fails (`RequestFailed`), which its caller judges. `first_calls`: counts against an endpoint that has
    not answered usably yet (`FIRST_FAILURES`). `proves`: the endpoint answered as an API does. `attempts`: a bound
    of its own on the attempts of a call that fails this way (None: the client's)."""

    retried: bool
    unusable: bool
    first_calls: bool
    proves: bool
    attempts: int | None = None


TABLE: Mapping[Kind, Rule] = {
    Kind.NOT_A_URL: Rule(retried=False, unusable=True, first_calls=False, proves=False),
    # The resolver says for certain that the name does not exist: no wait changes that.
    Kind.NO_SUCH_HOST: Rule(retried=False, unusable=True, first_calls=False, proves=False),
    # Refused, a failed TLS handshake, a name not resolved just now, no connection within the connect timeout.
    Kind.UNREACHABLE: Rule(retried=True, unusable=True, first_calls=True, proves=False),
    Kind.NO_ANSWER: Rule(retried=True, unusable=False, first_calls=True, proves=False),
    Kind.DROPPED: Rule(retried=True, unusable=False, first_calls=True, proves=False),
    # 5xx, 408, 409.
    Kind.SERVER_ERROR: Rule(retried=True, unusable=False, first_calls=True, proves=False),
    # Retried through the key's pace (`pacing.Gate`); a limit is no sign of a wrong endpoint.
    Kind.RATE_LIMITED: Rule(retried=True, unusable=False, first_calls=False, proves=False),
    # Not JSON, no choices, an HTML page, `{}`: what the API never answers.
    Kind.UNREADABLE: Rule(retried=True, unusable=False, first_calls=True, proves=False),
    # The key (401), its permissions (403), the URL or the model (404, 405), a 400 about a parameter (one the host
    # does not take, in whatever words: `failures.refused_parameter`).
    Kind.REFUSED_REQUEST: Rule(retried=False, unusable=True, first_calls=False, proves=True),
    # Any other 4xx (a prompt a filter flags, say): the caller's to judge.
    Kind.REFUSED: Rule(retried=False, unusable=False, first_calls=False, proves=True),
    # A readable answer whose content the caller cannot use (a verdict that is not JSON): the model's doing.
    Kind.UNUSABLE_CONTENT: Rule(retried=True, unusable=False, first_calls=False, proves=True),
    # Content that cannot be used, from an answer the output cap ended (a thinking model's cap ran out before its
    # verdict): the same cap runs out again, all but always. Asked once more, since a sampled answer's length
    # varies, and no more: 12 attempts would pay 12 times for what only a larger cap cures.
    Kind.CUT_SHORT: Rule(retried=True, unusable=False, first_calls=False, proves=True, attempts=CUT_SHORT_ATTEMPTS),
}


@dataclass(frozen=True)
class Failure:
    """One failed attempt: its kind, the cause in words (one line: "HTTP 500: <the body's start>", "no answer within
    120 s"), and what the server said with it. `where` is added when a call fails of it ("from URL")."""

    kind: Kind
    cause: str
    status: int | None = None
    body: bytes = b""
    retry_after: float | None = None
    request_id: str | None = None
    should_retry: bool | None = None  # the server's x-should-retry header, when it sent one
    where: str = ""

    @property
    def rule(self) -> Rule:
        """What this failure leads to."""
        return TABLE[self.kind]

    @property
    def retried(self) -> bool:
        """Whether to ask again: the server's word when it gave one, else the table's."""
        return self.should_retry if self.should_retry is not None else self.rule.retried


class AttemptFailed(Exception):
    """An attempt that failed as `failure` says (the client's own: never raised out of it); `sent`, the bytes of a
    request the server answered with a refusal (for what it says of the parameters this project adds); `failover`,
    a failure of one server of a pool that another may take at once (`routing`)."""

    def __init__(self, failure: Failure, sent: bytes = b"", *, failover: bool = False) -> None:
        super().__init__(failure.cause)
        self.failure = failure
        self.sent = sent
        self.failover = failover


def is_retryable(status: int) -> bool:
    """Whether an HTTP status is worth asking again, the server saying nothing more (a 4xx other than these is the
    caller's mistake)."""
    return status in RETRY_STATUSES or status >= 500


@dataclass(frozen=True)
class Retries:
    """How often and how patiently to retry: `max_attempts` counts the first try."""

    max_attempts: int = MAX_ATTEMPTS
    initial_backoff: float = INITIAL_BACKOFF
    max_backoff: float = MAX_BACKOFF
    jitter: float = JITTER
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt number `attempt + 1`."""
        if retry_after is not None and 0 <= retry_after <= MAX_RETRY_AFTER:
            return retry_after
        delay = min(self.max_backoff, self.initial_backoff * 2.0 ** (attempt - 1))
        return delay * (1 - self.jitter * self.rng.random())


def log_retry(
    target: str,
    failure: Failure,
    wait: float,
    attempt: int,
    of: int,
    redact: Callable[[str], str],
    *,
    elsewhere: bool = False,
) -> None:
    """The one line a retry logs (at INFO): what is asked again, when (`elsewhere`: at once, at another server of a
    pool), which attempt, after what, and the provider's request id; never the key (`redact` takes it out of what the
    server echoed)."""
    if log.isEnabledFor(logging.INFO):
        if elsewhere:
            when = "at another server of the pool"
        elif wait <= 0 and failure.kind is Kind.RATE_LIMITED:
            when = "through the key's pace"
        else:
            when = f"in {wait:.2f} s"
        said = f" (x-request-id {failure.request_id})" if failure.request_id else ""
        log.info("retrying %s %s, attempt %d of %d, after %s%s", target, when, attempt, of, redact(failure.cause), said)


class Health:
    """Whether one client's endpoint has answered usably yet, and, once it is found unusable, the verdict that
    every call gets at once for `VERDICT_HOLDS` seconds (see `FIRST_FAILURES`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.proven = False
        self.failures = 0  # attempts failed in a way that counts, while none was answered usably
        self._clock = clock
        self._verdict: tuple[EndpointUnusable, float] | None = None
        self.answers = 0  # of the first `FIRST_ANSWERS` answers, those seen, and those that could not be used
        self.unusable_answers = 0
        self._limited_since: float | None = None  # when its first 429 came, while nothing else has

    def check(self) -> None:
        """Raise the verdict while it holds; after that, the endpoint is tried afresh, as at the start."""
        if self._verdict is None:
            return
        verdict, until = self._verdict
        if self._clock() < until:
            raise verdict
        self._verdict, self.proven, self.failures = None, False, 0

    def answered(self) -> None:
        """A usable answer (or one that shows the endpoint is an API: a refusal of a prompt, say)."""
        self.proven = True
        self._limited_since = None

    def content(self, usable: bool) -> bool:
        """Count an answer whose content could (`usable`) or could not be used; whether the endpoint is now unusable
        by its first answers (`FIRST_ANSWERS`)."""
        if self.answers >= FIRST_ANSWERS or self._verdict is not None:
            return False
        self.answers += 1
        self.unusable_answers += not usable
        return self.unusable_answers >= UNUSABLE_SHARE * FIRST_ANSWERS

    def limited(self) -> float | None:
        """A 429, while nothing else has come: the seconds since the first, once past `FIRST_LIMITS` (the endpoint
        is then unusable), else None."""
        if self.proven:
            return None
        now = self._clock()
        if self._limited_since is None:
            self._limited_since = now
        waited = now - self._limited_since
        return waited if waited >= FIRST_LIMITS else None

    def unproven_failure(self, failure: Failure, attempt: int, max_attempts: int) -> bool:
        """Count a failed attempt (number `attempt` of its call); whether the endpoint, never answered usably, is
        now unusable by the first-calls rule."""
        if failure.rule.proves:
            self.proven = True
        if self.proven or not failure.rule.first_calls:
            return False
        self.failures += 1
        return attempt >= min(FIRST_CALL_ATTEMPTS, max_attempts) or self.failures >= FIRST_FAILURES

    def found(self, verdict: EndpointUnusable) -> EndpointUnusable:
        """Hold `verdict` (see `check`) and return it."""
        self._verdict = (verdict, self._clock() + VERDICT_HOLDS)
        return verdict


LIMITLESS = (
    "a key whose limit is zero or whose quota is spent, or a gateway that refuses every request; check the key's "
    "limits and the endpoint, then run the same command again"
)


def unusable_answers(failure: Failure, unusable: int, seen: int, cap: int | None) -> str:
    """Why an endpoint whose first answers cannot be used is unusable, in words, with what cures it (`cap`: the
    requests' output cap)."""
    said = f"answers, but {unusable} of its first {seen} answers could not be used (the last: {failure.cause})"
    if failure.kind is Kind.CUT_SHORT:
        now = f", {cap:,} tokens now" if cap is not None else ""
        return (
            f"{said}: asking again does not cure an output cap that ends the answers; give the grader a larger one "
            f"(`grader_max_output_tokens`{now}) or less reasoning effort"
        )
    return (
        f"{said}: a model that thinks before it answers needs its server's reasoning parser (vLLM and SGLang: "
        "--reasoning-parser) or an output cap its thinking fits (`grader_max_output_tokens`); otherwise check the "
        "chat template the server applies, or choose a model that follows the prompt's JSON format"
    )
