"""The one network seam: a client of one OpenAI-compatible endpoint (Chat Completions or the Responses API),
with a retry table.

Every model call of the project goes through `ApiClient.complete`; `wire` says what the requests and answers
look like. The client owns the process-wide concurrency budget (one semaphore shared by every task that uses it)
and the retries, whose decisions are data in `retrying`: transport failures, retryable statuses and unusable
answers are retried with exponential backoff and jitter, Retry-After and `x-should-retry` are honoured, and each
retry is one log line (`healthbench.api`, at INFO). Request starts go through the `pacing.Gate` of its key at its
endpoint, which keeps them under the account's rate limits; a 429 is retried through that same gate, and one that
says the account has no quota left raises `QuotaExhausted` at once. What waiting cannot cure raises
`EndpointUnusable`: a URL that is not one, a refusal of the request itself, an endpoint that cannot be reached, or
one none of whose first calls gets a usable answer. Past the bound, `RequestFailed` says what went wrong last;
it never becomes a result. Every attempt has a bound of its own (`timeout`, seconds). The API key goes into the
Authorization header and nowhere else: not into errors, not into logs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp

from healthbench.api import descriptors
from healthbench.api.breaker import Breaker
from healthbench.api.completer import Completer as Completer  # re-exported: what graders and policies call
from healthbench.api.completer import Request
from healthbench.api.failures import (
    TRANSPORT,
    ProviderError,
    cut_short,
    excerpt,
    read_refusal,
    refused_parameter,
    said,
    shown,
    status_failure,
    transport_failure,
)
from healthbench.api.hosts import REFERENCE_PARAMETERS, Adaptations
from healthbench.api.inflight import InFlight
from healthbench.api.keygates import gate_for
from healthbench.api.pacing import Gate
from healthbench.api.pacing.gate import Budget as Budget  # re-exported: made with clients
from healthbench.api.pacing.gate import Budgets as Budgets  # re-exported: made with clients
from healthbench.api.ratesignals import DEFAULT_OUTPUT_CAP, output_cap, request_cost
from healthbench.api.retrying import (
    LIMITLESS,
    AttemptFailed,
    Failure,
    Health,
    Kind,
    log_retry,
    unusable_answers,
)
from healthbench.api.retrying import (
    RETRY_STATUSES as RETRY_STATUSES,  # re-exported: what is worth asking again
)
from healthbench.api.retrying import Retries as Retries  # re-exported: made with clients
from healthbench.api.routing import Router, Server
from healthbench.api.wire import CHAT, Api, Reading, Usage
from healthbench.errors import (
    EndpointUnusable,
    InvalidResponse,
    QuotaExhausted,
    RequestFailed,
    SettingsError,
    UnreadableAnswer,
)

if TYPE_CHECKING:  # the Redis client is imported only by a run that shares its pace
    from healthbench.api.pacing.store import PaceStore

T = TypeVar("T")

OPENAI_BASE_URL = "https://api.openai.com/v1"
TIMEOUT = 120.0
"""Seconds an attempt may take by default, connecting, waiting and reading the whole answer."""
CONNECT_TIMEOUT = 10.0
"""Seconds to make a connection: a host that does not answer at all is known within them, not within `timeout`."""
_JSON = {"Content-Type": "application/json"}
# Batch input and output files run to hundreds of megabytes: no total limit, only a stalled read.
_BULK = aiohttp.ClientTimeout(total=None, sock_connect=60, sock_read=300)


class ApiClient(Completer):
    """Requests to one API (`wire.CHAT` or `wire.RESPONSES`) of an OpenAI-compatible endpoint, or of a pool of
    servers of one model (several base URLs: `routing`), under a concurrency budget at each.

    Loop-bound resources (the HTTP session, the budget's semaphore) are made on first use in the running loop, so
    one client can be built anywhere and shared by every task of the process.
    """

    def __init__(
        self,
        base_url: str | Sequence[str] = OPENAI_BASE_URL,
        api_key: str | None = None,
        *,
        concurrency: int = 64,
        timeout: float = TIMEOUT,
        retry: Retries | None = None,
        budget: Budget | Budgets | None = None,
        api: Api = CHAT,
        rpm: float | None = None,
        tpm: float | None = None,
        default_output_cap: int = DEFAULT_OUTPUT_CAP,
        max_concurrency: int | None = None,
        pace_store: PaceStore | None = None,
        slow_start: bool = True,
    ) -> None:
        """`base_url` is one server, or several serving one model (a pool: each request goes to one of them, a
        reply's items to one server where its budget allows, and a server that fails is taken out and tried
        again later: `routing`, `breaker`). `timeout` bounds each attempt, in seconds. `rpm` and `tpm` are the
        account's limits, as the user knows them (None: learned from the server); a request with no output cap
        counts `default_output_cap` tokens against `tpm`. Each server's budget is `budget` (one server), its own of
        `budget` (`Budgets`), or one made here of `concurrency` places, growing with the limit up to
        `max_concurrency` when that is larger. With `pace_store`, each key's pace is shared with every process that
        uses the same store. Without `slow_start`, a key whose limits are not known yet is sent the whole budget at
        once instead of twenty requests, then more with each answer (a trainer's step is such a burst anyway: the
        slow start would only put it off by a few rounds); its 429s teach the pace as they do any other."""
        urls = [url.rstrip("/") for url in ([base_url] if isinstance(base_url, str) else base_url)]
        if not urls:
            raise SettingsError("a client needs at least one base URL")
        if isinstance(budget, Budget) and len(urls) > 1:
            raise SettingsError("one budget cannot serve a pool of servers: give each its own (`Budgets`)")
        self.base_url = ",".join(urls)
        self.shown = ",".join(map(shown, urls))  # as it may be shown: no password, of any server
        if api_key and self.shown != self.base_url:
            raise SettingsError(
                f"{self.shown} is given with a user and password in its URL, and a key: each is a way to authorise a "
                "request (HTTP Basic from the URL, a Bearer token from the key), and a request carries one; give either"
            )
        self.wire = api
        self.retry = retry or Retries()
        # Content-Type is set per request: a multipart upload (`api`) needs its own.
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout, CONNECT_TIMEOUT))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        servers = []
        for url in urls:
            own = budget.of(url) if isinstance(budget, Budgets) else budget or Budget(concurrency, max_concurrency)
            gate = gate_for(url, api_key, pace_store)
            gate.set_limits(rpm, tpm)
            if not slow_start:
                gate.skip_slow_start()
            # What the server refuses of the parameters the project adds, learned once for every task that uses this
            # client (a served environment's pooled grader of one key is one client for all its sessions). Not shared
            # by URL: a URL is no host's identity (a server restarted on it, a port reused, may take other fields).
            hosts = Adaptations(shown(url + api.path))
            servers.append(Server(url, url + api.path, own, gate, hosts))
        self.router = Router(servers, self._redact)
        self.servers = self.router.servers
        self.concurrency = sum(server.budget.floor for server in self.servers)
        # What a retry's log line says is asked again, made once rather than for every call.
        where = f"{self.shown}{api.path}" if not self.router.pooled else f"{api.path} at {self.shown}"
        self._target = f"POST {where}"
        self.default_output_cap = default_output_cap
        self._health = Health()
        self._in_flight = InFlight()

    def __repr__(self) -> str:
        return f"ApiClient(url={self.base_url + self.wire.path!r}, concurrency={self.concurrency})"

    @property
    def server(self) -> Server:
        """The server of a client of one (the Batch API's, whose files and batches live at one endpoint)."""
        if self.router.pooled:
            raise SettingsError(f"{self.shown} is a pool of servers, and this needs one endpoint")
        return self.servers[0]

    @property
    def ceiling(self) -> int:
        """The most requests this client may ever have in flight: its servers' budgets' ceilings together."""
        return sum(server.budget.ceiling for server in self.servers)

    def _bind(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            connections = self.ceiling
            descriptors.make_room(connections)
            connector = aiohttp.TCPConnector(limit=connections, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, headers=self._headers)
            self._loop = loop
        return self._session

    def _transport(
        self, exc: aiohttp.ClientError | TimeoutError, timeout: aiohttp.ClientTimeout, where: str
    ) -> AttemptFailed:
        patience = timeout.total or timeout.sock_read or 0.0
        failure = transport_failure(exc, patience, timeout.sock_connect or patience, shown(where))
        return AttemptFailed(failure)

    async def _attempt(self, server: Server, payload: bytes, cost: int, alone: bool) -> Reading:
        """One exchange with `server`, whose place the caller holds and this frees once the answer is read (whatever
        happens first)."""
        try:
            session = self._bind()
            ticket = await server.gate.start(cost)
            payload = server.hosts.outgoing(payload, alone)  # as learned by the time it goes
            try:
                self._health.check()  # found unusable while this one waited: it is not sent
                sent = time.monotonic()
                async with self._in_flight.out(), session.post(server.url, data=payload, headers=_JSON) as response:
                    body = await response.read()
                    status = response.status
                    headers = response.headers
                on_the_wire = time.monotonic() - sent
            except TRANSPORT as exc:
                server.gate.lost(ticket)
                raise self._transport(exc, self._timeout, server.base_url) from None
            except EndpointUnusable:
                server.gate.lost(ticket)
                raise
        finally:
            self.router.release(server)
        if status == 429:
            # A limit holds every start of this key at the gate (retry at once, through it); noise makes only
            # this request wait its hint, or the retry table's backoff.
            retry = await server.gate.refused(ticket, cost, body, headers)
            raise AttemptFailed(dataclasses.replace(status_failure(status, body, headers), retry_after=retry))
        await server.gate.answered(ticket, headers)
        server.budget.need(server.gate, server.gate.in_flight_needed())
        if status != 200:
            raise AttemptFailed(status_failure(status, body, headers), sent=payload)
        try:
            reading = self.wire.reading(body)
        except UnreadableAnswer as exc:
            cause = f"HTTP 200, {exc}: {excerpt(body)}"
            request_id = headers.get("x-request-id")
            raise AttemptFailed(Failure(Kind.UNREADABLE, cause, 200, body, request_id=request_id)) from None
        except InvalidResponse as exc:  # readable, but with nothing to use (no content): the model's doing
            raise AttemptFailed(Failure(Kind.UNUSABLE_CONTENT, str(exc))) from None
        reading.usage.wire_microseconds = round(on_the_wire * 1_000_000)
        return reading

    async def _routed(self, payload: bytes, cost: int, affinity: str | None) -> tuple[Reading, Server]:
        """One attempt of `payload` at a server the router chooses (`affinity`: what its siblings share), as that
        server takes it (`hosts.Adaptations`): a refusal of a parameter this project added is met there, by sending
        the request again without it, and is no failed attempt. The server's breaker hears how it went."""
        while True:
            server = await self.router.acquire(affinity)
            if server is None:
                everyone = f"every server of the pool is out: {self.router.out()}"
                if self.router.lasting():  # what no wait cures, at every server: the run stops now
                    raise self.unusable(everyone, refused=True)
                raise AttemptFailed(Failure(Kind.UNREACHABLE, everyone))
            held = True  # the place at the server, until `_attempt` (which frees it whatever happens) has it
            told = False
            try:
                turn = await server.hosts.turn(payload)
                try:
                    held = False
                    reading = await self._attempt(server, payload, cost, alone=turn is not None)
                except AttemptFailed as exc:
                    told = True
                    if self._adapted(server, exc):
                        continue
                    raise self._judged(server, exc) from None
                finally:
                    if turn is not None:
                        turn.release()
                # The request that went alone was answered: the host takes what it carried, or what was learned.
                server.hosts.settled = server.hosts.settled or turn is not None
                told = True
                self.router.answered(server)
                return reading, server
            finally:
                if held:
                    self.router.release(server)
                if not told:
                    self.router.abandoned(server)

    def _adapted(self, server: Server, exc: AttemptFailed) -> bool:
        """Whether the failed attempt was a refusal of a parameter this project added, now left out at `server`
        (`hosts.Adaptations.learn`): the request goes again. Only a request sent with an added parameter says whether
        the host takes it (a policy's says nothing, nor an answer that is no refusal)."""
        sent, failure = exc.sent, exc.failure
        if sent and server.hosts.carried(sent) and server.hosts.learn(failure.status, failure.body, sent):
            self.router.answered(server)
            return True
        return False

    def _judged(self, server: Server, exc: AttemptFailed) -> AttemptFailed:
        """The failed attempt at `server` told to its breaker, as the retry loop takes it: at once at another server of
        a pool when the failure was the server's and another takes requests (`failover`); when the pool's last server
        goes out, the call fails as one endpoint's would, naming them all."""
        failure = exc.failure
        lasting = failure.rule.unusable and not failure.retried
        self.router.failed(server, failure, lasting=lasting)
        if failure.kind is Kind.UNUSABLE_CONTENT:
            # An answer with no content at all: one of what its server's answers say (`Breaker.content`).
            self.router.content(server, failure)
        if not (self.router.pooled and (lasting or Breaker.counts(failure))):
            return exc
        if self.router.elsewhere(server):
            exc.failover = True
            return exc
        everyone = dataclasses.replace(failure, cause=f"every server of the pool is out: {self.router.out()}")
        return AttemptFailed(everyone, exc.sent)

    async def _complete(self, request: Request, parse: Callable[[str], T]) -> tuple[T, Usage]:
        """Send one request (a body, or its JSON bytes) to this client's API and parse its content, with retries.

        `parse` raises `InvalidResponse` for content that is not usable; that is retried like a transport
        failure. Usage counts every answered attempt, since each one is billed. `ident` is not needed live:
        every call is its own request. `QuotaExhausted` if the account has no quota left: never retried.
        """
        payload = request.payload
        cost = request_cost(request.parsed(), self.default_output_cap)
        usage = Usage()

        # Whether the attempt is the call's first answer: the endpoint's first answers are judged on those.
        first = [True]

        async def attempt() -> T:
            judged, first[0] = first[0], False
            try:
                reading, server = await self._routed(payload, cost, request.affinity)
                self._health.answered()
                usage.add(reading.usage)
                try:
                    parsed = parse(reading.content)
                except InvalidResponse as exc:
                    why = cut_short(reading, exc) if reading.cut else str(exc)
                    failure = Failure(Kind.CUT_SHORT if reading.cut else Kind.UNUSABLE_CONTENT, why)
                    self.router.content(server, failure)
                    raise AttemptFailed(failure) from None
            except AttemptFailed as exc:
                failure = exc.failure
                # Each call's first answer alone, so that how many calls a run has, not how their retries fall in time,
                # decides whether it stops here. A pool's servers are judged each by its breaker (`router.content`):
                # the pool stops once all are out.
                unusable = failure.kind in (Kind.UNUSABLE_CONTENT, Kind.CUT_SHORT) and not self.router.pooled
                if unusable and judged and self._health.content(usable=False):
                    health, cap = self._health, output_cap(request.parsed())
                    said = unusable_answers(failure, health.unusable_answers, health.answers, cap)
                    raise self.unusable(said, refused=True) from None
                raise
            self.router.content(server, None)
            if judged:
                self._health.content(usable=True)
            return parsed

        try:
            with self._in_flight.call():
                return await self._with_retries(attempt, self._target, "a request"), usage
        except QuotaExhausted as exc:
            raise exc.at(self.base_url) from None

    async def api(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        form: Callable[[], aiohttp.FormData] | None = None,
        read: Callable[[bytes], T],
        bulk: bool = True,
    ) -> T:
        """One call to another endpoint of the same API (`/files`, `/batches`), under the same retry table;
        returns what `read` makes of the body of a 2xx answer (`InvalidResponse` for a body it cannot read:
        retried, and counted against an endpoint that has not answered usably yet). `form` builds a multipart
        body afresh for each attempt. `bulk`: a file of hundreds of megabytes may come or go, so no bound on the whole
        but a stalled read; else a small answer, under this client's own timeout."""
        timeout = _BULK if bulk else self._timeout
        server = self.server
        url = server.base_url + path

        async def attempt() -> T:
            session = self._bind()
            data = form() if form is not None else None if json_body is None else json.dumps(json_body).encode()
            headers = _JSON if json_body is not None else None
            try:
                async with server.budget.slot():
                    self._health.check()  # found unusable while this one waited: it is not sent
                    async with session.request(method, url, data=data, headers=headers, timeout=timeout) as response:
                        body = await response.read()
                        status = response.status
                        response_headers = response.headers
            except TRANSPORT as exc:
                raise self._transport(exc, timeout, server.base_url) from None
            if status == 429 and read_refusal(body, response_headers).quota:
                raise QuotaExhausted(self.base_url)
            if not 200 <= status < 300:
                raise AttemptFailed(status_failure(status, body, response_headers))
            try:
                answer = read(body)
            except InvalidResponse as exc:
                cause = f"HTTP {status}, {exc}: {excerpt(body)}"
                raise AttemptFailed(Failure(Kind.UNREADABLE, cause, status, body)) from None
            self._health.answered()
            return answer

        return await self._with_retries(attempt, f"{method} {shown(url)}", f"{method} {path}")

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]], target: str, asked: str) -> T:
        """Run `attempt` until it succeeds, as `retrying.TABLE` says; `RequestFailed` with the last cause past the
        bound, or at once for a failure not retried; `EndpointUnusable` for what waiting cannot cure. `target` is
        what the log line names ("POST URL"), `asked` what a refusal says was refused ("a request")."""
        bound = self.retry.max_attempts
        number = 0
        while True:
            number += 1
            self._health.check()
            try:
                return await attempt()
            except AttemptFailed as exc:
                failure = exc.failure
                failover = exc.failover
            self._health.check()  # found unusable meanwhile, by another call: that one verdict
            if failover and number < bound:
                # A pool's server failed it and another takes requests: asked again there at once. The server's
                # failure is its own breaker's to count, not the pool's first-calls rule's.
                log_retry(target, failure, 0.0, number + 1, bound, self._redact, elsewhere=True)
                continue
            if self._health.unproven_failure(failure, number, bound):
                raise self._unusable(failure, asked, first=self._health.failures) from None
            if failure.kind is Kind.RATE_LIMITED and (waited := self._health.limited()) is not None:
                cause = f"answered nothing but 429 (rate limited) for {waited:.0f} s, naming no limit it would lift at"
                raise self.unusable(f"{cause}: the last, {failure.cause}; {LIMITLESS}", refused=False) from None
            if not failure.retried or number >= min(bound, failure.rule.attempts or bound):
                if failure.rule.unusable:
                    raise self._unusable(failure, asked) from None
                # A refusal keeps its status and body for the caller to judge (a prompt refused, say); a call that
                # ran out of attempts is no refusal, whatever its last status.
                status, body = (failure.status, failure.body) if not failure.retried else (None, b"")
                cut = failure.kind is Kind.CUT_SHORT
                raise RequestFailed(failure.cause + failure.where, number, status=status, body=body, cut_short=cut)
            wait = self.retry.backoff(number, failure.retry_after)
            log_retry(target, failure, wait, number + 1, bound, self._redact)
            await asyncio.sleep(wait)

    def _redact(self, text: str) -> str:
        """`text` without this client's key (a server may echo it)."""
        key = self._headers.get("Authorization", "").removeprefix("Bearer ")
        return text.replace(key, "[redacted]") if key else text

    def _unusable(self, failure: Failure, asked: str, *, first: int = 0) -> EndpointUnusable:
        """`EndpointUnusable` for `failure`, which ended a call; `first`: found by the first-calls rule, after that
        many failures."""
        if failure.kind in (Kind.UNREACHABLE, Kind.NO_SUCH_HOST):
            cause = f"cannot be reached ({failure.cause})"
        elif failure.kind is Kind.REFUSED_REQUEST:
            error = ProviderError.parse(failure.status, failure.body)
            cause = f"refused {asked} ({said(failure.status, error, failure.cause)})"
            if (name := refused_parameter(failure.status, failure.body)) in REFERENCE_PARAMETERS:
                cause += f": it does not take {name}, which the reference's request carries, so nothing is left out"
            elif name is not None:
                cause += f": it does not take the parameter {name}"
        elif first:
            cause = f"gave no usable answer to its first {first} requests (the last: {failure.cause})"
        else:
            cause = failure.cause
        return self.unusable(cause, refused=failure.kind is Kind.REFUSED_REQUEST)

    def unusable(self, cause: str, *, refused: bool) -> EndpointUnusable:
        """`EndpointUnusable` for this endpoint for `cause` (what it did, in words), held for the calls after it
        (`retrying.Health`): one line, the URL without a password, never the key."""
        line = self._redact(" ".join(cause.split()))
        return self._health.found(EndpointUnusable(self.shown, line, refused=refused))

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
    gate (one key at one endpoint) are shown once, under all their names; a pool's servers each."""
    names: dict[int, list[str]] = {}
    gates: dict[int, Gate] = {}
    for name, client in clients.items():
        if isinstance(client, ApiClient):
            for server in client.servers:
                shown_as = name if len(client.servers) == 1 else f"{name} at {server.shown}"
                names.setdefault(id(server.gate), []).append(shown_as)
                gates[id(server.gate)] = server.gate
    return "; ".join(f"{'+'.join(names[key])}: {gate.status()}" for key, gate in gates.items())
