"""The fake server's rate limiter, modelled on OpenAI's: which model requests it refuses, and what it says.

Requests and tokens per minute are token buckets refilled continuously and enforced over a short window
(OpenAI: "60,000 requests/minute may be enforced as 1,000 requests/second"); a request's tokens are its
prompt plus its output cap, counted on arrival. Refused requests may count against the buckets (they do at
OpenAI) or not; the ``x-ratelimit-*`` headers may be sent or not (many gateways send none); a 429's message
names the limit in OpenAI's words, or says only that there was one; its retry hint is exact, or optimistic
(computed before the refused request itself is counted), and carried by ``retry-after-ms`` and ``Retry-After``, by
``Retry-After`` and the message in whole seconds only, or by the message alone (``hints``), and the message may
give even the shortest wait in seconds ("0.012s"); the message's "Used"
may count the refused request itself; a window may be a fixed one (a counter emptied at each multiple of it, as a
limiter counting per calendar minute does) or a sliding log (each request counted leaves it a window later) instead
of a bucket refilled continuously. After ``quota`` answered requests the account has no
credit left and every request is refused with ``insufficient_quota``.

``RateLimits.hard`` is the limiter at its least forgiving, as OpenAI's behaves: every refused request takes its
share of the bucket with no bound on the debt (a client that keeps sending into a 429 starves itself for as long
as it does), each 429 carries ``retry-after-ms`` and "Please try again in Xs" worked out before the refusal is
counted (so they run one request's worth short), ``x-ratelimit-remaining-*`` reads 0 while the bucket is in debt
and ``x-ratelimit-reset-*`` counts the debt. The default limiter forgives debt past one window and, unless told
otherwise, gives exact hints. ``RateLimits.plain`` is the plainest limiter OpenAI documents: a one-second bucket
refilled continuously, exact hints (``retry-after-ms`` to the millisecond, ``Retry-After`` in whole seconds, and the
message's wait in seconds to the millisecond), no ``x-ratelimit-*`` headers.

``Limiter.decide`` is pure (it takes the time), so a simulation can drive it; the server calls
``Limiter.admit`` once per model request, before any work on it.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from healthbench.errors import SettingsError
from healthbench.testing.replies import estimate_tokens

__all__ = ["QUOTA_MESSAGE", "Decision", "Limiter", "RateLimits", "WindowKind"]

QUOTA_MESSAGE = "You exceeded your current quota, please check your plan and billing details."
WindowKind = Literal["bucket", "fixed", "log"]
_DOCS = " For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."


@dataclass(frozen=True)
class RateLimits:
    """How the fake limits model requests: see the module docstring. ``None`` leaves a limit off."""

    rpm: float | None = None
    tpm: float | None = None
    window: float = 1.0  # seconds of the per-minute limits a burst may use at once
    count_refused: bool = True
    headers: bool = True
    numbers: bool = True  # a 429's message names the limit, its use and when to try again
    quota: int | None = None  # answered requests before the account's credit runs out
    default_max_tokens: int = 4096  # what a request without an output cap is counted at
    # Retry hints computed before the refused request itself is counted, as some limiters do: a client that
    # waits exactly that long is refused again.
    optimistic_hints: bool = False
    # How deep refused requests may drive a bucket into debt, in windows of its limit; None: without bound.
    debt: float | None = 1.0
    # Whether a 429 carries retry-after-ms and Retry-After; None: when it carries the x-ratelimit headers.
    retry_headers: bool | None = None
    # Seconds before a 429 is answered: decided on arrival, before any work, it still crosses a network, and the
    # requests the client sends meanwhile are refused too.
    refusal_latency: float = 0.0
    # How a 429 says when to try again: "ms", retry-after-ms and Retry-After (whole seconds, rounded up) and the
    # message's wait to the millisecond, as OpenAI's; "seconds", Retry-After and the message in whole seconds only,
    # rounded up (gateways, Azure); "message", no retry header at all, only the message's wait.
    hints: Literal["ms", "seconds", "message"] = "ms"
    # Whether the message's "Used" counts the refused request too (some limiters count it before they word it).
    used_counts_request: bool = False
    # Whether the message gives a wait under a second in seconds to the millisecond ("0.012s"), not in "12ms".
    wait_in_seconds: bool = False
    # How the window refills: "bucket", continuously; "fixed", a counter emptied at each multiple of ``window``
    # seconds (as a limiter counting per calendar minute does; a refusal's debt ends with its window); "log", a
    # sliding log where each request counted leaves the window ``window`` seconds after it came (a burst comes
    # back as room a window later, all at once; a refusal counted stays a whole window).
    kind: WindowKind = "bucket"

    def __post_init__(self) -> None:
        if any(limit is not None and limit <= 0 for limit in (self.rpm, self.tpm)):
            raise SettingsError("rpm and tpm must be positive")
        if self.window <= 0:
            raise SettingsError("window must be positive")
        if self.quota is not None and self.quota < 0:
            raise SettingsError("quota must be non-negative")
        if (self.debt is not None and self.debt < 0) or self.refusal_latency < 0:
            raise SettingsError("debt and refusal_latency must be non-negative")

    @classmethod
    def per_second(cls, rate: float) -> RateLimits:
        """The older ``rate_limit`` setting: ``rate`` requests a second, refused ones not counted, with headers."""
        return cls(rpm=rate * 60, count_refused=False)

    @classmethod
    def hard(
        cls, rpm: float | None = None, tpm: float | None = None, *, headers: bool = True, count_refused: bool = True
    ) -> RateLimits:
        """The limiter at its least forgiving (see the module docstring): debt without bound, hints one request
        short, retry-after-ms on every 429, with or without the x-ratelimit headers."""
        return cls(
            rpm=rpm,
            tpm=tpm,
            headers=headers,
            count_refused=count_refused,
            optimistic_hints=True,
            debt=None,
            retry_headers=True,
        )

    @classmethod
    def plain(cls, rpm: float, *, count_refused: bool = True) -> RateLimits:
        """The plainest limiter OpenAI documents (see the module docstring): `rpm` in a one-second bucket refilled
        continuously, exact hints in ``retry-after-ms``, ``Retry-After`` (whole seconds, at least 1) and the
        message ("Please try again in 0.012s."), no x-ratelimit headers; a refusal's debt stops at one window."""
        return cls(rpm=rpm, headers=False, count_refused=count_refused, retry_headers=True, wait_in_seconds=True)


@dataclass(frozen=True)
class Decision:
    """The limiter's answer to one request: admitted (``refused`` None) or refused, and the headers it carries."""

    refused: Literal["requests", "tokens", "quota"] | None
    headers: dict[str, str] = field(default_factory=dict)
    message: str = ""


def _duration(seconds: float) -> str:
    """A duration as OpenAI writes them: "20ms", "4.7s", "6m0s"."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60:
        return f"{math.ceil(seconds * 1000) / 1000:g}s"
    return f"{int(seconds // 60)}m{math.ceil(seconds % 60)}s"


class _Bucket:
    """One per-minute limit, enforced over ``window`` seconds: holds up to that window's share of it, refilled
    continuously ("bucket"), all at once at each multiple of the window ("fixed"), or as each request counted
    leaves the last window ("log": a sliding log of what was counted)."""

    def __init__(self, per_minute: float, window: float, debt: float | None, now: float, kind: WindowKind) -> None:
        self.per_minute = per_minute
        self.rate = per_minute / 60
        self.window = window
        self.kind = kind
        self.capacity = max(1.0, self.rate * window)
        self.floor = -math.inf if debt is None else -debt * self.capacity
        self.level = self.capacity
        self.updated = now
        self.log: deque[tuple[float, float]] = deque()  # when each request was counted, and its cost

    def refill(self, now: float) -> None:
        if self.kind == "bucket":
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        elif self.kind == "fixed" and math.floor(now / self.window) > math.floor(self.updated / self.window):
            self.level = self.capacity
        while self.kind == "log" and self.log and self.log[0][0] <= now - self.window:
            self.level += self.log.popleft()[1]
        self.updated = now

    def fits(self, cost: float) -> bool:
        # A request bigger than the whole window's share goes when the bucket is full, and leaves it in debt.
        return self.level >= min(cost, self.capacity)

    def take(self, cost: float) -> None:
        # A bounded debt forgives a storm of refused requests past it; an unbounded one starves its client for as
        # long as the storm lasts.
        spent = min(cost, self.level - self.floor)
        self.level -= spent
        if self.kind == "log" and spent > 0:
            self.log.append((self.updated, spent))

    def wait(self, cost: float) -> float:
        """Seconds until a request of ``cost`` would fit."""
        need = min(cost, self.capacity) - self.level
        if need <= 0:
            return 0.0
        if self.kind == "fixed":
            return (math.floor(self.updated / self.window) + 1) * self.window - self.updated
        if self.kind == "log":
            for at, spent in self.log:
                need -= spent
                if need <= 0:
                    return at + self.window - self.updated
        return need / self.rate

    def until_full(self) -> float:
        """Seconds until the bucket is full again."""
        return self.wait(self.capacity) if self.kind != "bucket" else (self.capacity - self.level) / self.rate

    def headers(self, suffix: str) -> dict[str, str]:
        return {
            f"x-ratelimit-limit-{suffix}": str(math.floor(self.per_minute)),
            f"x-ratelimit-remaining-{suffix}": str(max(0, math.floor(self.level))),
            f"x-ratelimit-reset-{suffix}": _duration(self.until_full()),
        }


def _prompt_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_prompt_chars(item) for item in value)
    if isinstance(value, dict):
        return _prompt_chars(value.get("content")) + _prompt_chars(value.get("text"))
    return 0


def request_tokens(body: dict[str, Any], default_max_tokens: int) -> int:
    """A request's tokens as the limiter counts them on arrival: its prompt plus its output cap."""
    chars = sum(_prompt_chars(body.get(key)) for key in ("messages", "input", "instructions"))
    caps = [body.get(key) for key in ("max_tokens", "max_completion_tokens", "max_output_tokens")]
    cap = next((value for value in caps if isinstance(value, int) and not isinstance(value, bool)), default_max_tokens)
    return estimate_tokens(chars) + cap


class Limiter:
    """Admits model requests under ``limits`` (a ``RateLimits``, a request rate per second, or None: all)."""

    def __init__(self, limits: RateLimits | float | None, now: float) -> None:
        if limits is not None and not isinstance(limits, RateLimits):
            limits = RateLimits.per_second(limits)
        self.limits = limits
        self.answered = 0
        self.answered_tokens = 0  # as the token limit counts them: prompts plus output caps
        self._requests: _Bucket | None = None
        self._tokens: _Bucket | None = None
        if limits is not None and limits.rpm:
            self._requests = _Bucket(limits.rpm, limits.window, limits.debt, now, limits.kind)
        if limits is not None and limits.tpm:
            self._tokens = _Bucket(limits.tpm, limits.window, limits.debt, now, limits.kind)

    @property
    def quota_spent(self) -> bool:
        """Whether the account's quota has run out: from now on every request is refused for it."""
        return self.limits is not None and self.limits.quota is not None and self.answered >= self.limits.quota

    def decide(self, body: dict[str, Any], now: float) -> Decision:
        """Admit or refuse one request arriving at ``now``, and count it."""
        limits = self.limits
        if limits is None:
            return Decision(None)
        if self.quota_spent:
            return Decision("quota", message=QUOTA_MESSAGE + _DOCS)
        cost = request_tokens(body, limits.default_max_tokens)
        pairs = (("requests", self._requests, 1.0), ("tokens", self._tokens, float(cost)))
        buckets = [(name, bucket, spent) for name, bucket, spent in pairs if bucket is not None]
        for _, bucket, _ in buckets:
            bucket.refill(now)
        short = next(((name, bucket, spent) for name, bucket, spent in buckets if not bucket.fits(spent)), None)
        # What the refusing limit had used before this request, in its per-minute units, as OpenAI reports it.
        used = 0 if short is None else round((short[1].capacity - short[1].level) * 60 / limits.window)
        early = short[1].wait(short[2]) if short is not None and limits.optimistic_hints else None
        if short is None or limits.count_refused:
            for _, bucket, spent in buckets:
                bucket.take(spent)
        if short is not None and limits.used_counts_request:
            used = round((short[1].capacity - short[1].level) * 60 / limits.window)
        headers: dict[str, str] = {}
        if limits.headers:
            for name, bucket, _ in buckets:
                headers |= bucket.headers(name)
        if short is None:
            self.answered += 1
            self.answered_tokens += cost
            return Decision(None, headers)
        name, bucket, spent = short
        wait = bucket.wait(spent) if early is None else early
        if limits.hints != "message" and (limits.headers if limits.retry_headers is None else limits.retry_headers):
            headers["Retry-After"] = str(math.ceil(wait))
            if limits.hints == "ms":
                headers["retry-after-ms"] = str(math.ceil(wait * 1000))
        again = f"{math.ceil(wait)}s" if limits.hints == "seconds" else _duration(wait)
        if limits.wait_in_seconds and limits.hints != "seconds" and wait < 1:
            again = f"{math.ceil(wait * 1000) / 1000:.3f}s"
        message = f"Rate limit reached for {name}"
        if limits.numbers:
            message = (
                f"Rate limit reached for {body.get('model', 'fake-model')} in organization org-fake on {name} per "
                f"min ({'RPM' if name == 'requests' else 'TPM'}): Limit {math.floor(bucket.per_minute)}, Used "
                f"{used}, Requested {math.ceil(spent)}. Please try again in {again}. Visit "
                "https://platform.openai.com/account/rate-limits to learn more."
            )
        return Decision("requests" if name == "requests" else "tokens", headers, message)

    def admit(self, body: dict[str, Any], now: float) -> tuple[web.Response | None, dict[str, str]]:
        """Return a 429 to send instead of an answer, or None and the headers the answer carries."""
        decision = self.decide(body, now)
        if decision.refused is None:
            return None, decision.headers
        quota = decision.refused == "quota"
        error = {
            "message": decision.message,
            "type": "insufficient_quota" if quota else decision.refused,
            "param": None,
            "code": "insufficient_quota" if quota else "rate_limit_exceeded",
        }
        # Answered at once: a real limiter refuses before doing any work.
        text = json.dumps({"error": error})
        return web.Response(status=429, text=text, content_type="application/json", headers=decision.headers), {}
