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
  while another has a queue it cannot serve now, the oldest request waiting for the most crowded server (a prefix
  miss, counted).

Places are had two ways: at once (`Budget.take`) while nobody waits for one, else by waiting in the router's queues
while the router claims places at its servers' budgets (`Budget.claim`); a budget shared by several routers (serve's
graders of several keys) offers each free place to its claimants in turn, so no key's requests wait without bound.
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

from healthbench.api.breaker import Breaker, Change, State
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
    shown: str = field(init=False)
    """The server as it may be shown: without a password."""

    def __post_init__(self) -> None:
        self.shown = shown(self.base_url)

    def load(self) -> float:
        """Its places in use against its budget."""
        return self.budget.in_use / self.budget.limit

    def has_room(self) -> bool:
        """Whether it takes a request now: open, with a free place."""
        return self.breaker.open() and self.budget.in_use < self.budget.limit


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
    """What a router did with requests that carry an affinity: how many found no home yet (`homed`: a reply's
    first, which its server's prefix cache cannot serve), went to their home (`at_home`) or elsewhere (`away`: taken
    by a server that would have idled)."""

    homed: int = 0
    at_home: int = 0
    away: int = 0


class Router:
    """Places at `servers` for requests, as the module docstring says. `redact` takes the key out of what a line it
    logs quotes. Loop-bound pieces are made per running loop, as `Budget` makes its own."""

    def __init__(
        self, servers: Sequence[Server], redact: Callable[[str], str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.servers = list(servers)
        self.pooled = len(self.servers) > 1
        self.counts = RouteCounts()
        self._redact = redact
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queues: dict[Server, deque[_Waiter]] = {}
        self._fresh: OrderedDict[object, deque[_Waiter]] = OrderedDict()
        self._homes: OrderedDict[str, Server] = OrderedDict()
        self._waiting = 0
        self._soon: asyncio.Handle | None = None
        self._timer: asyncio.TimerHandle | None = None

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
        """A place at a server for one request, held until `release`; None when every server is out."""
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
        if self._waiting == 1:
            for server in self.servers:
                server.budget.claim(self)
        self._later()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled() and (server := waiter.future.result()):
                self.abandoned(server)  # granted as it was cancelled: an out server's trial may go again
                self.release(server)
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
        if affinity is None:
            return server
        if how is _Route.HOME:
            self.counts.at_home += 1
            self._homes.move_to_end(affinity)
        elif how is _Route.AWAY:
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

    def offered(self, budget: Budget) -> bool:
        """A place at `budget` (`Budget.claim`): put the request its server takes next there, if there is one."""
        if not self._waiting:
            return False
        server = next(server for server in self.servers if server.budget is budget)
        found = self._next_for(server) if server.breaker.open() else None
        if found is not None:
            waiter, how = found
            self._waiting -= 1
            waiter.future.set_result(self._granted(server, waiter.affinity, how))
            # What is left may be another server's to take, now that this one has filled: looked at after this turn.
            self._later()
        if not self._waiting:
            for each in self.servers:
                each.budget.withdraw(self)
        return found is not None

    def _later(self) -> None:
        """Hand out places once the requests arriving in this turn of the loop are all queued: the items of a reply
        arrive together, and are homed together."""
        if self._soon is None and self._loop is not None and self._waiting:
            self._soon = self._loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        """Offer every open server's free places, least loaded server first, again while any is taken (a server that
        had nothing to take may have a queue to take from once the others have filled); with every server out, the
        waiting requests fail now, and a dispatch is due when the first may be tried again."""
        self._soon = None
        while self._waiting and any([server.budget.offer() for server in sorted(self.servers, key=Server.load)]):
            pass
        if not self._waiting:
            return
        now = self._clock()
        if not any(server.breaker.open(now) for server in self.servers):
            for waiter in self._drain():
                waiter.future.set_result(None)
        self._due()

    def _next_for(self, server: Server) -> tuple[_Waiter, _Route] | None:
        """The request `server` takes next, and how (`_granted`): its own, else the first of the oldest affinity not
        homed (homed here, the others queued here), else the oldest of the longest queue whose own server cannot
        take it now; None if nobody waits that it should take."""
        own = self._queues[server]
        if (waiter := self._first(own)) is not None:
            return waiter, _Route.HOME
        while self._fresh:
            _, group = self._fresh.popitem(last=False)
            if (waiter := self._first(group)) is not None:
                own.extend(group)
                return waiter, _Route.NEW
        stuck = [queue for other, queue in self._queues.items() if queue and not other.has_room()]
        if stuck and (waiter := self._first(max(stuck, key=len))) is not None:
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

    def _due(self) -> None:
        """One timer for the earliest time an out server may be tried again, while requests wait."""
        out = [server.breaker.back_at for server in self.servers if server.breaker.state is State.OUT]
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if out and self._loop is not None:
            self._timer = self._loop.call_later(max(0.0, min(out) - self._clock()), self._later)

    def _drain(self) -> list[_Waiter]:
        """Every live waiter, taken out of the queues (the router claims no place any more)."""
        waiters = [waiter for queue in self._queues.values() for waiter in queue]
        waiters += [waiter for group in self._fresh.values() for waiter in group]
        for queue in self._queues.values():
            queue.clear()
        self._fresh.clear()
        self._waiting = 0
        for server in self.servers:
            server.budget.withdraw(self)
        return [waiter for waiter in waiters if not waiter.future.done()]

    def answered(self, server: Server) -> None:
        """A request at `server` was answered as an API answers (a usable answer, or a refusal of that request)."""
        if self.pooled:
            self._changed(server, server.breaker.answered())

    def failed(self, server: Server, failure: Failure, *, lasting: bool = False) -> None:
        """A request at `server` failed as `failure` says (`lasting`: what no wait cures). A failure that does not
        tell against the server is an answer; one that takes it out is said in one line, and what waited for it is
        homed elsewhere."""
        if not self.pooled:
            return
        if not (lasting or Breaker.counts(failure)):
            self.answered(server)
            return
        self._changed(
            server, server.breaker.failed(failure, self._redact(" ".join(failure.cause.split())), lasting=lasting)
        )

    def content(self, server: Server, failure: Failure | None) -> None:
        """An answer of `server` whose content could be used (`failure` None) or not (`breaker.Breaker.content`):
        a pool's server whose first answers cannot be used is taken out, as one that does not answer is."""
        if self.pooled:
            self._changed(server, server.breaker.content(failure, self._redact))

    def _changed(self, server: Server, change: Change) -> None:
        """Say what `change` did to `server`, in one line: back in (its requests are taken again), or out (what waited
        for it is homed elsewhere, and it is looked at again when it may be tried)."""
        if change is Change.BACK:
            log.warning("judge server %s is back in the pool", server.shown)
            self._later()
        elif change is Change.OUT:
            self._taken_out(server)

    def _taken_out(self, server: Server) -> None:
        """Say that `server` is out, home what waited for it elsewhere, and look again when it may be tried."""
        log.warning(
            "judge server %s is out of the pool (%s); tried again in %.0f s, meanwhile its requests go to the others",
            server.shown,
            server.breaker.cause,
            server.breaker.cool_down,
        )
        if self._loop is None:
            return
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
        self._due()

    def abandoned(self, server: Server) -> None:
        """A request at `server` ended with no outcome (cancelled)."""
        if self.pooled:
            server.breaker.abandoned()

    def elsewhere(self, server: Server) -> bool:
        """Whether another server than `server` takes requests now: a request that failed there goes to it at once."""
        now = self._clock()
        return self.pooled and any(other is not server and other.breaker.open(now) for other in self.servers)

    def lasting(self) -> bool:
        """Whether every server is out for what no wait cures (a refusal, or answers that cannot be used)."""
        return all(server.breaker.state is not State.IN and server.breaker.lasting for server in self.servers)

    def out(self) -> str:
        """Why each server is out, in words, for a request that found them all so."""
        return "; ".join(f"{server.shown}: {server.breaker.cause or 'out'}" for server in self.servers)
