"""The one network seam: a client of one OpenAI-compatible endpoint (Chat Completions or the Responses API),
with a retry table.

Every model call of the project goes through `ChatClient.complete`; `wire` says what the requests and answers
look like. The client owns the process-wide
concurrency budget (one semaphore shared by every task that uses it) and the retry policy: transport
failures, retryable statuses and unusable answers are retried with exponential backoff and jitter, and
Retry-After is honoured. Past the bound, `RequestFailed` says what went wrong last; it never becomes a
result. The API key goes into the Authorization header and nowhere else: not into errors, not into logs.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import random
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import aiohttp
from pydantic import SecretStr

from .wire import CHAT, Api, InvalidResponse, Usage

T = TypeVar("T")

OPENAI_BASE_URL = "https://api.openai.com/v1"

# Statuses worth asking again, as openai-python retries them; anything else 4xx is the caller's mistake.
RETRY_STATUSES = frozenset({408, 409, 429})
_MAX_RETRY_AFTER = 120.0
_JSON = {"Content-Type": "application/json"}
# Batch input and output files run to hundreds of megabytes: no total limit, only a stalled read.
_BULK = aiohttp.ClientTimeout(total=None, sock_connect=60, sock_read=300)


class RequestFailed(Exception):
    """A request that did not succeed within the retry bound, or failed in a way not worth retrying."""

    def __init__(self, cause: str, attempts: int) -> None:
        super().__init__(f"{cause} (after {attempts} attempt{'s' if attempts != 1 else ''})")
        self.cause = cause
        self.attempts = attempts


class Deferred(Exception):
    """A request left in a batch for a later session to collect (`--no-wait`): neither an answer nor a failure."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry.

    `max_attempts` counts the first try. With a quarter of requests failing, 12 attempts leave about one
    chance in 60 million that a given call fails for good.
    """

    max_attempts: int = 12
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    jitter: float = 0.25
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt number `attempt + 1`."""
        if retry_after is not None and 0 <= retry_after <= _MAX_RETRY_AFTER:
            return retry_after
        delay = min(self.max_backoff, self.initial_backoff * 2.0 ** (attempt - 1))
        return delay * (1 - self.jitter * self.rng.random())


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait, from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None


def duration_seconds(text: str) -> float | None:
    """Parse OpenAI's rate-limit reset durations such as "1s", "6m0s", "500ms" or "0.5"."""
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    index = 0
    while index < len(text):
        char = text[index]
        if char.isdigit() or char == ".":
            number += char
            index += 1
            continue
        unit = "ms" if text.startswith("ms", index) else char
        if unit not in units or not number:
            return None
        total += float(number) * units[unit]
        number, index = "", index + len(unit)
    return total + float(number) if number else total


class RateGovernor:
    """Paces request starts once the server has said "too many", then creeps back up.

    Until the first 429 nothing is paced. A 429 sets the pace to 90% of the successes seen in the last
    second (at most once per second, since one overload produces a burst of 429s); each success raises the
    pace by 2% of a request per second, i.e. about 2% a second at any rate. An answer saying no requests
    remain holds new starts until the window resets. This keeps a run close to a provider's limit without
    a storm of 429s, without knowing the limit in advance.

    Two guards keep stray 429s (a proxy's, a provider's hiccup) from strangling a run: early in a run the
    accepted rate is counted over the time actually seen, not a full second; and no cut goes below a quarter
    of the best rate ever accepted, since each cut is measured against a pace the previous cut set.
    """

    WINDOW = 1.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate: float | None = None
        self.throttled = 0
        self._clock = clock
        self._next_start = 0.0
        self._last_cut = -1e9
        self._first_success: float | None = None
        self._peak = 0
        self._successes: deque[float] = deque()

    async def wait(self) -> None:
        """Sleep until this request may start."""
        now = self._clock()
        start = max(now, self._next_start)
        self._next_start = start + (1.0 / self.rate if self.rate else 0.0)
        if start > now:
            await asyncio.sleep(start - now)

    def _recent(self, now: float) -> int:
        while self._successes and self._successes[0] < now - self.WINDOW:
            self._successes.popleft()
        return len(self._successes)

    def on_success(self, headers: Mapping[str, str]) -> None:
        """Count a success; respect a reported empty request budget."""
        now = self._clock()
        if self._first_success is None:
            self._first_success = now
        self._successes.append(now)
        recent = self._recent(now)
        if now - self._first_success >= self.WINDOW:
            self._peak = max(self._peak, recent)
        if self.rate is not None:
            self.rate += 0.02
        if headers.get("x-ratelimit-remaining-requests") == "0":
            reset = duration_seconds(headers.get("x-ratelimit-reset-requests", ""))
            if reset is not None and 0 < reset <= _MAX_RETRY_AFTER:
                self._next_start = max(self._next_start, now + reset)

    def on_throttle(self) -> None:
        """A 429: slow down to just under what the server has been accepting."""
        self.throttled += 1
        now = self._clock()
        if self._first_success is None or now - self._last_cut < self.WINDOW:
            return
        self._last_cut = now
        # Early in a run the window is not full yet: rate over the time actually seen.
        seen = min(self.WINDOW, max(now - self._first_success, 0.05))
        accepted = self._recent(now) / seen
        self.rate = max(1.0, 0.9 * accepted, 0.25 * self._peak / self.WINDOW)


class Completer(Protocol):
    """What graders and policies call: one model request, its answer parsed, with what it cost.

    `ChatClient` sends it live; `batch.BatchClient` sends it through the Batch API. `ident` tells apart
    requests with equal bodies that must each get an answer of their own (repeats of a policy sample).
    """

    async def complete(
        self, body: Mapping[str, Any] | bytes, parse: Callable[[str], T], *, ident: str | None = None
    ) -> tuple[T, Usage]:
        """Send one request and parse its content; raise `RequestFailed` past the retry bound."""

    async def aclose(self) -> None:
        """Release connections."""


# Rate limits belong to a key at an endpoint, not to a client object: clients that share both (the policy and
# the grader of one run, say) must slow down together. Weak values: a governor lives as long as its clients.
_GOVERNORS: weakref.WeakValueDictionary[str, RateGovernor] = weakref.WeakValueDictionary()


def _governor_for(url: str, api_key: str | None) -> RateGovernor:
    slot = hashlib.sha256(f"{url}\n{api_key or ''}".encode()).hexdigest()
    governor = _GOVERNORS.get(slot)
    if governor is None:
        governor = _GOVERNORS[slot] = RateGovernor()
    return governor


class Budget:
    """A limit on requests in flight, shared by every client given it, bound to the loop that uses it."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("concurrency must be at least 1")
        self.limit = limit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._semaphore: asyncio.Semaphore | None = None

    def semaphore(self) -> asyncio.Semaphore:
        """The semaphore for the running loop (an asyncio.Semaphore serves one loop only)."""
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._loop is not loop:
            self._semaphore, self._loop = asyncio.Semaphore(self.limit), loop
        return self._semaphore


class ChatClient:
    """Requests to one API (`wire.CHAT` or `wire.RESPONSES`) of one OpenAI-compatible endpoint, under one
    concurrency budget.

    Loop-bound resources (the HTTP session, the budget's semaphore) are made on first use in the running loop, so
    one client can be built anywhere and shared by every task of the process.
    """

    def __init__(
        self,
        base_url: str = OPENAI_BASE_URL,
        api_key: str | None = None,
        *,
        concurrency: int = 64,
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        budget: Budget | None = None,
        api: Api = CHAT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.wire = api
        self.url = self.base_url + api.path
        # A budget shared with other clients (one per API key on a server) keeps one limit per process.
        self.budget = budget or Budget(concurrency)
        self.concurrency = self.budget.limit
        self.retry = retry or RetryPolicy()
        # Content-Type is set per request: a multipart upload (`api`) needs its own.
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self.governor = _governor_for(self.url, api_key)

    def __repr__(self) -> str:
        return f"ChatClient(url={self.url!r}, concurrency={self.concurrency})"

    def _bind(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            connector = aiohttp.TCPConnector(limit=self.concurrency, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, headers=self._headers)
            self._loop = loop
        return self._session

    async def _attempt(self, payload: bytes) -> tuple[str, Usage]:
        session = self._bind()
        async with self.budget.semaphore():
            await self.governor.wait()
            async with session.post(self.url, data=payload, headers=_JSON) as response:
                body = await response.read()
                status = response.status
                headers = response.headers
        if status == 200:
            self.governor.on_success(headers)
            return self.wire.read(body)
        if status == 429:
            self.governor.on_throttle()
        raise _status_error(status, body, headers)

    async def complete(
        self, body: Mapping[str, Any] | bytes, parse: Callable[[str], T], *, ident: str | None = None
    ) -> tuple[T, Usage]:
        """Send one request (a body, or its JSON bytes) to this client's API and parse its content, with retries.

        `parse` raises `InvalidResponse` for content that is not usable; that is retried like a transport
        failure. Usage counts every answered attempt, since each one is billed. `ident` is not needed live:
        every call is its own request.
        """
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        usage = Usage()

        async def attempt() -> T:
            content, attempt_usage = await self._attempt(payload)
            usage.add(attempt_usage)
            return parse(content)

        return await self._with_retries(attempt), usage

    async def api(
        self, method: str, path: str, *, json_body: Any = None, form: Callable[[], aiohttp.FormData] | None = None
    ) -> bytes:
        """One call to another endpoint of the same API (`/files`, `/batches`), under the same retry table;
        returns the body of a 2xx answer. `form` builds a multipart body afresh for each attempt."""
        url = self.base_url + path

        async def attempt() -> bytes:
            session = self._bind()
            data = form() if form is not None else None if json_body is None else json.dumps(json_body).encode()
            headers = _JSON if json_body is not None else None
            request = session.request(method, url, data=data, headers=headers, timeout=_BULK)
            async with self.budget.semaphore(), request as response:
                body = await response.read()
                status = response.status
                response_headers = response.headers
            if 200 <= status < 300:
                return body
            raise _status_error(status, body, response_headers)

        return await self._with_retries(attempt)

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt` until it succeeds, by the retry table; `RequestFailed` with the last cause past it."""
        cause = "no attempt made"
        for number in range(1, self.retry.max_attempts + 1):
            retry_after: float | None = None
            try:
                return await attempt()
            except RequestFailed as exc:
                raise RequestFailed(exc.cause, number) from None
            except _StatusError as exc:
                cause, retry_after = exc.cause, exc.retry_after
            except InvalidResponse as exc:
                cause = str(exc)
            except (aiohttp.ClientError, TimeoutError) as exc:
                cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if number < self.retry.max_attempts:
                await asyncio.sleep(self.retry.backoff(number, retry_after))
        raise RequestFailed(cause, self.retry.max_attempts)

    async def aclose(self) -> None:
        """Close the HTTP session, if one was opened in this loop."""
        if self._session is not None and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None
        self._loop = None


class _StatusError(Exception):
    def __init__(self, cause: str, retry_after: float | None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.retry_after = retry_after


def is_retryable(status: int) -> bool:
    """Whether an HTTP status is worth asking again (a 4xx other than these is the caller's mistake)."""
    return status in RETRY_STATUSES or status >= 500


def _status_error(status: int, body: bytes, headers: Mapping[str, str]) -> Exception:
    """A retryable `_StatusError`, or `RequestFailed` for a status not worth retrying."""
    cause = f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}"
    if is_retryable(status):
        return _StatusError(cause, retry_after_seconds(headers))
    return RequestFailed(cause, 1)


class Endpoint(Protocol):
    """The settings of one endpoint's client (the grader's, the policy's)."""

    @property
    def base_url(self) -> str: ...
    @property
    def api_key(self) -> SecretStr | None: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def timeout(self) -> float: ...
    @property
    def max_attempts(self) -> int: ...


def client_for(endpoint: Endpoint, budget: Budget | None = None, api: Api = CHAT) -> ChatClient:
    """The live client of `api` for an endpoint's settings: the one place a client is made from them."""
    return ChatClient(
        endpoint.base_url,
        endpoint.api_key.get_secret_value() if endpoint.api_key else None,
        concurrency=endpoint.concurrency,
        timeout=endpoint.timeout,
        retry=RetryPolicy(max_attempts=endpoint.max_attempts),
        budget=budget,
        api=api,
    )
