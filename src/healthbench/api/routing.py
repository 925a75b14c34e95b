"""Which server of a client's pool a request goes to, and when.

A client may send to several servers of one model (a pool of self-hosted judge servers: vLLM or SGLang replicas);
each server has a budget of its own (`Budget`: the requests it may have in flight), a pace of its own (its key's
gate) and a breaker (`breaker.Breaker`: whether it takes requests now). The router hands each request a place at
one server, and keeps two aims at once:

- **every server full.** A place that frees at a server is filled at once from the requests waiting, and a new
  request goes to the server with the most room (in flight against its budget).
- **a reply's items on one server.** The grader prompt begins with the conversation, so the ~12 item prompts of one
  reply share a long prefix, which a server's prefix cache (vLLM's, SGLang's) serves again only to requests that
  reach that server. A request carries an affinity (the reply's `prompt_cache_key`); the first of an affinity to go
  makes that server its home, and the others wait for a place there. A server with room takes, in this order: a
  request whose home it is; the oldest affinity not yet homed (it becomes its home); else, so that no server idles
  while others have a queue, the oldest request waiting for the most crowded server (a prefix miss, counted).

A server that goes out (its breaker opens) gives its waiting requests back to be homed elsewhere; what it had in
flight fails and is asked again (the client's retry). A client of one server is a plain queue in arrival order.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from healthbench.api.breaker import Breaker, State
from healthbench.api.failures import shown
from healthbench.api.hosts import Adaptations
from healthbench.api.pacing import Gate
from healthbench.api.pacing.gate import Budget
from healthbench.api.retrying import Failure

log = logging.getLogger("healthbench.api")

HOMES = 65_536
"""Affinities whose home a router remembers, the least recently used forgotten first: far more replies than are
ever graded at once, so a reply's home is not forgotten while its items go."""


@dataclass(eq=False)
class Server:
    """One server of a client: its base URL, the URL its requests go to, its budget, its key's gate there, what it
    refuses of the parameters this project adds, and its breaker."""

    base_url: str
    url: str
    budget: Budget
    gate: Gate
    hosts: Adaptations
    breaker: Breaker = field(default_factory=Breaker)

    @property
    def shown(self) -> str:
        """The server as it may be shown (no password)."""
        return shown(self.base_url)

    def load(self) -> float:
        """Its places in use against its budget."""
        return self.budget.in_use / self.budget.limit


class _Route(enum.Enum):
    """How a request went (`Router._granted`): to its affinity's home, making its server the home, or elsewhere."""

    HOME = "home"
    NEW = "new"
    AWAY = "away"


@dataclass(eq=False)
class _Waiter:
    affinity: str | None
    future: asyncio.Future[Server | None]


@dataclass
class RouteCounts:
    """What a router did: places handed out by server (`sent`, by base URL), and of those with an affinity, how many
    went to its home once it had one (`at_home`) and how many found none yet (`homed`: a reply's first) or went
    elsewhere (`away`: taken by a server that would have idled)."""

    sent: dict[str, int] = field(default_factory=dict)
    homed: int = 0
    at_home: int = 0
    away: int = 0

    @property
    def home_share(self) -> float | None:
        """The share of requests with an affinity that went where one of theirs had gone before: those a prefix
        cache can serve (None before any)."""
        total = self.homed + self.at_home + self.away
        return self.at_home / total if total else None


class Router:
    """Places at `servers` for requests, as the module docstring says. Loop-bound pieces are made per running loop,
    as `Budget` makes its own."""

    def __init__(self, servers: Sequence[Server], clock: Callable[[], float] = time.monotonic) -> None:
        self.servers = list(servers)
        self.pooled = len(self.servers) > 1
        self.counts = RouteCounts()
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queues: dict[Server, deque[_Waiter]] = {}
        self._fresh: OrderedDict[object, deque[_Waiter]] = OrderedDict()
        self._homes: OrderedDict[str, Server] = OrderedDict()
        self._waiting = 0
        self._soon: asyncio.Handle | None = None
        self._timer: asyncio.TimerHandle | None = None
        for server in self.servers:
            server.budget.listen(self)

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._queues = {server: deque() for server in self.servers}
            self._fresh = OrderedDict()
            self._waiting = 0
            self._soon = None
            self._timer = None
        return loop

    async def acquire(self, affinity: str | None) -> Server | None:
        """A place at a server for one request, held until `release`; None when every server is out (`all_out`)."""
        loop = self._bind()
        affinity = affinity if self.pooled else None
        if not self._waiting:
            server = self._at_once(affinity)
            if server is not None:
                return server
            if not any(server.breaker.open() for server in self.servers):
                return None
        waiter = _Waiter(affinity, loop.create_future())
        home = self._homes.get(affinity) if affinity is not None else None
        if home is not None and home.breaker.state is State.IN:
            self._queues[home].append(waiter)
        else:
            self._fresh.setdefault(affinity if affinity is not None else waiter, deque()).append(waiter)
        self._waiting += 1
        self._later()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled() and (server := waiter.future.result()):
                self.release(server)  # granted as it was cancelled: give the place back
            raise

    def _at_once(self, affinity: str | None) -> Server | None:
        """A place taken now, with nobody waiting: at the affinity's home if it has room, else, for an affinity not
        homed yet (or homed at a server now out), at the open server with the most room; None to wait."""
        home = self._homes.get(affinity) if affinity is not None else None
        if home is not None and home.breaker.state is State.IN:
            return self._granted(home, affinity, _Route.HOME) if home.budget.take() else None
        now = self._clock()
        for server in sorted(self.servers, key=Server.load):
            if server.breaker.open(now) and server.budget.take():
                return self._granted(server, affinity, _Route.NEW)
        return None

    def _granted(self, server: Server, affinity: str | None, how: _Route) -> Server:
        """Count a place handed out at `server` (its breaker told: an out server's trial) for a request of
        `affinity`, which goes to its home (`HOME`), makes `server` its home (`NEW`) or goes elsewhere (`AWAY`)."""
        server.breaker.sent()
        self.counts.sent[server.base_url] = self.counts.sent.get(server.base_url, 0) + 1
        if affinity is None:
            return server
        if how == _Route.HOME:
            self.counts.at_home += 1
            self._homes.move_to_end(affinity)
        elif how == _Route.AWAY:
            self.counts.away += 1
        else:
            self.counts.homed += 1
            self._homes[affinity] = server
            self._homes.move_to_end(affinity)
            if len(self._homes) > HOMES:
                self._homes.popitem(last=False)
        return server

    def release(self, server: Server) -> None:
        """Free the place a request held at `server`."""
        server.budget.give_back()

    def room_freed(self) -> None:
        """A budget of one of the servers has room (`Budget.listen`)."""
        if self._waiting and self._loop is not None:
            self._later()

    def _later(self) -> None:
        """Hand out places once the requests arriving in this turn of the loop are all queued: the items of a reply
        arrive together, and are homed together."""
        if self._soon is None and self._loop is not None:
            self._soon = self._loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        """Fill every open server's free places from the waiting requests, least loaded server first."""
        self._soon = None
        now = self._clock()
        while self._waiting:
            now = self._clock()
            for server in sorted(self.servers, key=Server.load):
                if server.breaker.open(now) and server.budget.take():
                    break
            else:
                break
            found = self._next_for(server)
            if found is None:
                server.budget.give_back()
                break
            waiter, how = found
            self._waiting -= 1
            waiter.future.set_result(self._granted(server, waiter.affinity, how))
        if self._waiting and not any(server.breaker.open(now) for server in self.servers):
            self._all_out(now)

    def _next_for(self, server: Server) -> tuple[_Waiter, _Route] | None:
        """The request `server` takes next, and how (`_granted`): its own, else the first of the oldest affinity not
        homed (homed here, the others queued here), else the oldest of the longest queue; None if nobody waits."""
        own = self._queues[server]
        if (waiter := self._first(own)) is not None:
            return waiter, _Route.HOME
        while self._fresh:
            _, group = self._fresh.popitem(last=False)
            if (waiter := self._first(group)) is not None:
                own.extend(group)
                return waiter, _Route.NEW
        crowded = max(self._queues.values(), key=len)
        if (waiter := self._first(crowded)) is not None:
            return waiter, _Route.AWAY
        return None

    def _first(self, queue: deque[_Waiter]) -> _Waiter | None:
        """The first live waiter of `queue`, taken out of it (those cancelled meanwhile dropped)."""
        while queue:
            waiter = queue.popleft()
            if not waiter.future.done():
                return waiter
            self._waiting -= 1
        return None

    def _all_out(self, now: float) -> None:
        """Every server is out: the waiting requests fail now (each is asked again as its retry table says), and a
        dispatch is due when the first server may be tried again."""
        for waiter in self._drain():
            waiter.future.set_result(None)
        back = min(server.breaker.back_at for server in self.servers)
        if self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(max(0.0, back - now), self._retry)

    def _retry(self) -> None:
        self._timer = None
        self._later()

    def _drain(self) -> list[_Waiter]:
        """Every live waiter, taken out of the queues."""
        waiters = [waiter for queue in self._queues.values() for waiter in queue]
        waiters += [waiter for group in self._fresh.values() for waiter in group]
        for queue in self._queues.values():
            queue.clear()
        self._fresh.clear()
        self._waiting = 0
        return [waiter for waiter in waiters if not waiter.future.done()]

    def answered(self, server: Server) -> None:
        """A request at `server` was answered as an API answers (a usable answer, or a refusal of that request)."""
        if self.pooled and server.breaker.answered():
            log.warning("judge server %s is back in the pool", server.shown)
            self._later()

    def failed(self, server: Server, failure: Failure, *, lasting: bool = False) -> None:
        """A request at `server` failed as `failure` says (`lasting`: what no wait cures). A failure that does not
        tell against the server is an answer; one that takes it out is said in one line, and what waited for it is
        homed elsewhere."""
        if not self.pooled:
            return
        if not (lasting or Breaker.counts(failure)):
            self.answered(server)
            return
        if not server.breaker.failed(failure, lasting=lasting):
            return
        log.warning(
            "judge server %s is out of the pool (%s); tried again in %.0f s, meanwhile its requests go to the others",
            server.shown,
            " ".join(failure.cause.split()),
            server.breaker.cool_down,
        )
        if self._loop is not None:
            queue = self._queues.get(server)
            while queue:  # from the newest, each put first: the oldest ends up first, groups kept together
                waiter = queue.pop()
                key = waiter.affinity if waiter.affinity is not None else waiter
                if key in self._fresh:
                    self._fresh[key].appendleft(waiter)
                else:
                    self._fresh[key] = deque([waiter])
                self._fresh.move_to_end(key, last=False)
            self._later()
            back = server.breaker.back_at - self._clock()
            self._loop.call_later(max(0.0, back), self._later)

    def abandoned(self, server: Server) -> None:
        """A request at `server` ended with no outcome (cancelled)."""
        if self.pooled:
            server.breaker.abandoned()

    def elsewhere(self, server: Server) -> bool:
        """Whether another server than `server` takes requests now: a request that failed there goes to it at once."""
        now = self._clock()
        return self.pooled and any(other is not server and other.breaker.open(now) for other in self.servers)

    def out(self) -> str:
        """Why each server is out, in words, for a request that found them all so."""
        return "; ".join(f"{server.shown}: {server.breaker.cause or 'out'}" for server in self.servers)
