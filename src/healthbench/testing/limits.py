"""The fake server's rate limiter: which model requests it refuses with a 429, and the headers it sends.

The server calls ``Limiter.admit`` once per model request, before any work on it.
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from healthbench.testing.replies import error

__all__ = ["Limiter"]


class _TokenBucket:
    """Allows ``rate`` requests per second with a burst of one second's worth."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.updated = now

    def take(self, now: float) -> float:
        """Consume a token and return 0, or return the seconds until one becomes available."""
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate

    def headers(self, wait: float) -> dict[str, str]:
        # Until the bucket is full again, mirroring OpenAI's "time until the limit resets".
        reset = max(wait, (self.capacity - self.tokens) / self.rate)
        return {
            "x-ratelimit-limit-requests": str(math.floor(self.capacity)),
            "x-ratelimit-remaining-requests": str(math.floor(self.tokens)),
            "x-ratelimit-reset-requests": f"{math.ceil(reset * 1000)}ms",
        }


class Limiter:
    """Admits model requests at ``rate`` per second (None: all of them), as OpenAI's request limit does."""

    def __init__(self, rate: float | None, now: float) -> None:
        self._bucket = None if rate is None else _TokenBucket(rate, now)

    def admit(self, body: dict[str, Any], now: float) -> tuple[web.Response | None, dict[str, str]]:
        """Return a 429 to send instead of an answer, or None and the headers the answer carries."""
        if self._bucket is None:
            return None, {}
        wait = self._bucket.take(now)
        headers = self._bucket.headers(wait)
        if wait <= 0:
            return None, headers
        # Answered at once: a real limiter rejects before doing any work.
        retry_after = f"{math.ceil(wait * 1000) / 1000:g}"
        return error(429, "Rate limit reached for requests", "requests", {"Retry-After": retry_after, **headers}), {}
