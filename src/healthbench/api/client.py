"""The one network seam: a client of one OpenAI-compatible endpoint (Chat Completions or the Responses API),
with a retry table.

Every model call of the project goes through `ApiClient.complete`; `wire` says what the requests and answers
look like. The client owns the process-wide
concurrency budget (one semaphore shared by every task that uses it) and the retry policy: transport
failures, retryable statuses and unusable answers are retried with exponential backoff and jitter, and
Retry-After is honoured. Request starts go through the `pacing.Gate` of its key at its endpoint, which keeps
them under the account's rate limits; a 429 is retried through that same gate, and one that says the account
has no quota left raises `QuotaExhausted` at once. Past the bound, `RequestFailed` says what went wrong last;
it never becomes a result. The API key goes into the Authorization header and nowhere else: not into errors,
not into logs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import aiohttp

from healthbench.api.failures import BAD_URL, no_such_host, refusal, shown, unreachable
from healthbench.api.inflight import InFlight
from healthbench.api.pacing import Gate
from healthbench.api.pacing.gate import Budget as Budget  # re-exported: made with clients
from healthbench.api.ratesignals import DEFAULT_OUTPUT_CAP, read_refusal, request_cost, retry_after_seconds
from healthbench.api.wire import CHAT, Api, Usage
from healthbench.errors import EndpointUnusable, InvalidResponse, QuotaExhausted, RequestFailed

if TYPE_CHECKING:  # the Redis client is imported only by a run that shares its pace
    from healthbench.api.pacing.store import PaceStore

T = TypeVar("T")

OPENAI_BASE_URL = "https://api.openai.com/v1"

# Statuses worth asking again, as openai-python retries them; anything else 4xx is the caller's mistake.
RETRY_STATUSES = frozenset({408, 409, 429})
_MAX_RETRY_AFTER = 120.0
_JSON = {"Content-Type": "application/json"}
# An endpoint that has never answered this client and cannot be connected to (refused, a failed TLS handshake, a
# name its resolver cannot look up now) is called unusable after a call's third attempt (about 1.5 s of the retry
# table's backoff), or once the client's calls have failed to connect for 2 s (many calls queue for one start at
# a time before the first answer); a name that does not exist, at once. A server that is restarting may refuse
# for longer, but one that has never answered is more likely a wrong URL or a server not started, and the run
# stops within seconds instead of a minute. Once it has answered, the whole table applies.
_CONNECT_ATTEMPTS = 3
_CONNECT_PATIENCE = 2.0
# Batch input and output files run to hundreds of megabytes: no total limit, only a stalled read.
_BULK = aiohttp.ClientTimeout(total=None, sock_connect=60, sock_read=300)


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


class Completer(Protocol):
    """What graders and policies call: one model request, its answer parsed, with what it cost.

    `ApiClient` sends it live; `batch.BatchClient` sends it through the Batch API. `ident` tells apart
    requests with equal bodies that must each get an answer of their own (repeats of a policy sample).
    """

    async def complete(
        self, body: Mapping[str, Any] | bytes, parse: Callable[[str], T], *, ident: str | None = None
    ) -> tuple[T, Usage]:
        """Send one request and parse its content; raise `RequestFailed` past the retry bound."""

    async def aclose(self) -> None:
        """Release connections."""


# Rate limits belong to a key at an endpoint, not to a client object: clients that share both (the policy and
# the grader of one run, say; Chat and Responses calls of one key) must slow down together. OpenAI's limits are
# per model as well, so two models on one key share a pace they need not: slower, never refused. With a pace
# store, the pace is shared with every process that names the same store. Weak values: a gate lives as long as
# its clients.
_GATES: weakref.WeakValueDictionary[tuple[str, str | None], Gate] = weakref.WeakValueDictionary()


def key_slot(base_url: str, api_key: str | None) -> str:
    """A key at an endpoint, as a digest: what a pace is shared by, never the key itself."""
    return hashlib.sha256(f"{base_url.rstrip('/')}\n{api_key or ''}".encode()).hexdigest()


def _gate_for(base_url: str, api_key: str | None, store: PaceStore | None) -> Gate:
    slot = key_slot(base_url, api_key)
    entry = (slot, store.url if store else None)
    gate = _GATES.get(entry)
    if gate is None:
        gate = _GATES[entry] = Gate(store.pace(slot) if store else None)
    return gate


class ApiClient:
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
        rpm: float | None = None,
        tpm: float | None = None,
        default_output_cap: int = DEFAULT_OUTPUT_CAP,
        max_concurrency: int | None = None,
        pace_store: PaceStore | None = None,
    ) -> None:
        """`rpm` and `tpm` are the account's limits, as the user knows them (None: learned from the server);
        a request with no output cap counts `default_output_cap` tokens against `tpm`. A budget made here has
        `concurrency` places, and grows with the limit up to `max_concurrency` when that is larger. With
        `pace_store`, the key's pace is shared with every process that uses the same store."""
        self.base_url = base_url.rstrip("/")
        self.wire = api
        self.url = self.base_url + api.path
        # A budget shared with other clients (one per API key on a server) keeps one limit per process.
        self.budget = budget or Budget(concurrency, max_concurrency)
        self.concurrency = self.budget.floor
        self.retry = retry or RetryPolicy()
        # Content-Type is set per request: a multipart upload (`api`) needs its own.
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self.gate = _gate_for(self.base_url, api_key, pace_store)
        self.gate.set_limits(rpm, tpm)
        self.default_output_cap = default_output_cap
        self._reached = False  # whether any answer (of any status) has come from the endpoint
        self._unreached_since: float | None = None  # the first failure to connect, while none has answered
        self._in_flight = InFlight()

    def __repr__(self) -> str:
        return f"ApiClient(url={self.url!r}, concurrency={self.concurrency})"

    def _bind(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            connector = aiohttp.TCPConnector(limit=self.budget.ceiling, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, headers=self._headers)
            self._loop = loop
        return self._session

    async def _attempt(self, payload: bytes, cost: int) -> tuple[str, Usage]:
        session = self._bind()
        async with self.budget.slot():
            ticket = await self.gate.start(cost)
            try:
                async with self._in_flight.out(), session.post(self.url, data=payload, headers=_JSON) as response:
                    body = await response.read()
                    status = response.status
                    headers = response.headers
            except (aiohttp.ClientError, TimeoutError):
                self.gate.lost(ticket)
                raise
        if status == 429:
            # A limit holds every start of this key at the gate (retry at once, through it); noise makes only
            # this request wait its hint, or the retry table's backoff.
            retry = await self.gate.refused(ticket, cost, body, headers)
            raise _StatusError(f"HTTP 429: {body[:200].decode('utf-8', 'replace')}", retry)
        await self.gate.answered(ticket, headers)
        self.budget.need(self.gate, self.gate.in_flight_needed())
        if status == 200:
            return self.wire.read(body)
        raise _status_error(status, body, headers)

    async def complete(
        self, body: Mapping[str, Any] | bytes, parse: Callable[[str], T], *, ident: str | None = None
    ) -> tuple[T, Usage]:
        """Send one request (a body, or its JSON bytes) to this client's API and parse its content, with retries.

        `parse` raises `InvalidResponse` for content that is not usable; that is retried like a transport
        failure. Usage counts every answered attempt, since each one is billed. `ident` is not needed live:
        every call is its own request. `QuotaExhausted` if the account has no quota left: never retried.
        """
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        cost = request_cost(json.loads(payload) if isinstance(body, bytes) else body, self.default_output_cap)
        usage = Usage()

        async def attempt() -> T:
            content, attempt_usage = await self._attempt(payload, cost)
            usage.add(attempt_usage)
            return parse(content)

        try:
            with self._in_flight.call():
                return await self._with_retries(attempt), usage
        except QuotaExhausted:
            raise QuotaExhausted(f"{self.base_url}: the account has no quota left (insufficient_quota)") from None

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
            async with self.budget.slot(), request as response:
                body = await response.read()
                status = response.status
                response_headers = response.headers
            if 200 <= status < 300:
                return body
            if status == 429 and read_refusal(body, response_headers).quota:
                raise QuotaExhausted(f"{self.base_url}: the account has no quota left (insufficient_quota)")
            raise _status_error(status, body, response_headers)

        # A refusal here stays a `RequestFailed`, which the batch client says in its own words (an endpoint
        # without the Batch API answers 404); an endpoint that cannot be reached is `EndpointUnusable` all the same.
        return await self._with_retries(attempt, refusals=False)

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]], *, refusals: bool = True) -> T:
        """Run `attempt` until it succeeds, by the retry table; `RequestFailed` with the last cause past it.

        `EndpointUnusable` at once for what waiting cannot cure: a URL that is not one, or (with `refusals`) a
        refusal of the request itself (`ProviderError.about_request`); and for an endpoint that cannot be
        connected to, after `_CONNECT_ATTEMPTS` if it has never answered, else past the bound."""
        cause = "no attempt made"
        for number in range(1, self.retry.max_attempts + 1):
            retry_after: float | None = None
            try:
                answer = await attempt()
                self._reached = True
                return answer
            except RequestFailed as exc:
                self._reached = True
                if refusals and exc.error is not None and exc.error.about_request:
                    raise self._unusable(f"refused a request ({refusal(exc)})", refused=True) from None
                raise RequestFailed(exc.cause, number, status=exc.status, body=exc.body) from None
            except _StatusError as exc:
                self._reached = True
                cause, retry_after = exc.cause, exc.retry_after
            except InvalidResponse as exc:
                self._reached = True
                cause = str(exc)
            except BAD_URL:
                raise self._unusable("is not a URL (it needs http:// or https://, then a host)") from None
            except aiohttp.ClientConnectorError as exc:
                cause = unreachable(exc)
                if self._given_up(number, exc):
                    raise self._unusable(f"cannot be reached ({cause})") from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if number < self.retry.max_attempts:
                await asyncio.sleep(self.retry.backoff(number, retry_after))
        raise RequestFailed(cause, self.retry.max_attempts)

    def _given_up(self, number: int, exc: aiohttp.ClientConnectorError) -> bool:
        """Whether failing to connect (`exc`) on attempt `number` makes the endpoint unusable: a name that does not
        exist, at once; else see `_CONNECT_ATTEMPTS`."""
        if self._reached:
            return number >= self.retry.max_attempts
        if no_such_host(exc):
            return True
        now = time.monotonic()
        if self._unreached_since is None:
            self._unreached_since = now
        waited = now - self._unreached_since
        return number >= min(_CONNECT_ATTEMPTS, self.retry.max_attempts) or waited >= _CONNECT_PATIENCE

    def _unusable(self, cause: str, *, refused: bool = False) -> EndpointUnusable:
        """`EndpointUnusable` for this endpoint: one line, the URL without a password, never the key."""
        key = self._headers.get("Authorization", "").removeprefix("Bearer ")
        line = " ".join(cause.split())
        if key:
            line = line.replace(key, "[redacted]")
        return EndpointUnusable(shown(self.base_url), line, refused=refused)

    def halt(self) -> None:
        """Send nothing more (the user stopped the run): a request not yet sent waits until it is cancelled, and
        those already sent may land; see `landed`."""
        self._in_flight.halted = True

    async def landed(self) -> None:
        """Wait until every `complete` call with a request on the wire has returned its answer (or failed), so
        that what its caller stores on return is stored."""
        await self._in_flight.idle()

    async def aclose(self) -> None:
        """Close the HTTP session, if one was opened in this loop."""
        if self._session is not None and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None
        self._loop = None


def describe_pace(clients: Mapping[str, Completer | None]) -> str:
    """The pace of each live client, for the progress bar: "grader: 82 req/s, TPM-bound"; clients that share a
    gate (one key at one endpoint) are shown once, under all their names."""
    names: dict[int, list[str]] = {}
    gates: dict[int, Gate] = {}
    for name, client in clients.items():
        if isinstance(client, ApiClient):
            names.setdefault(id(client.gate), []).append(name)
            gates[id(client.gate)] = client.gate
    return "; ".join(f"{'+'.join(names[key])}: {gate.status()}" for key, gate in gates.items())


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
    return RequestFailed(cause, 1, status=status, body=body)
