"""A pace shared through Redis: every process that names the same store paces each key together.

`PaceStore(url)` is one Redis server (`redis://HOST:PORT/DB`, `rediss://` for TLS, `unix:///path?db=N`). Each
key at each endpoint is a hash named by a digest of the endpoint and the key (never the key), updated only by
the Lua scripts beside this module (`admit.lua`, `apply.lua`: the rules of `state.LocalPace`), atomically and on
Redis's clock, so processes on several machines agree. The hash expires an hour after its last use.

Faults of the store: `check` raises `PaceStoreUnreachable` (naming the URL without its password) when it cannot
be reached at start, before anything is sent. During a run, a store that stops answering is one warning on the
`healthbench.pacing` logger and a local pace (`state.LocalPace`, at this process's share of the limits known)
until a ping every few seconds finds it back; then what this process learned is published again (a restarted
store is empty) and the pace is shared again. The store is asked only before a start and after an answer, never
around a request: no answer is lost or asked twice because of it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import string
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from healthbench.api.pacing import state
from healthbench.api.pacing.state import DIMENSIONS, Admission, Ahead, Effects, Learned, Limits, LocalPace
from healthbench.errors import MissingExtra, PaceStoreUnreachable, SettingsError

if TYPE_CHECKING:  # the Redis client is imported when a store is first used: settings only check its URL
    import redis.asyncio as aioredis
    from redis.commands.core import AsyncScript

log = logging.getLogger("healthbench.pacing")

T = TypeVar("T")
PACE_STORE_VARIABLE = "HEALTHBENCH_PACE_STORE"
_SCHEMES = ("redis", "rediss", "unix")
_TIMEOUT = 1.0  # seconds a store may take to answer before it counts as lost
_RETRY_EVERY = 2.0  # seconds between two pings of a store that was lost
_MEMBER_EVERY = 2.0  # seconds between two re-registrations of this process among the key's users


@cache
def _store_errors(*more: type[Exception]) -> tuple[type[Exception], ...]:
    """What a store out of reach raises: every Redis error, the socket's own, and `more`."""
    from redis.exceptions import RedisError

    return (RedisError, OSError, *more)


def redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else ":***@"
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=user + host + (f":{parts.port}" if parts.port else "")))


def validated(url: str) -> str:
    """`url` if it names a Redis database (`redis://HOST:PORT/DB`, `rediss://`, `unix://`), else `SettingsError`."""
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise SettingsError(f"pace store {redacted(url)}: not a Redis URL (redis://HOST:PORT/DB, rediss://, unix://)")
    # redis-py reads a path that is no number as database 0: a typo would share a pace in the wrong place.
    if parts.scheme != "unix" and parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise SettingsError(f"pace store {redacted(url)}: the database must be a number (redis://HOST:PORT/0)")
    return url


def _script(name: str) -> str:
    constants = {
        "TTL": 3600,  # seconds a key's pace outlives its last use (an integer: EXPIRE takes no other)
        "MEMBER_TTL": 10.0,  # seconds a process counts among a key's users after its last start
        "USER_TTL": state.USER_TTL,
        "BURST": state.BURST,
        "HEADROOM": state.HEADROOM,
        "WINDOW": state.WINDOW,
        "CUT": state.CUT,
        "FLOOR": state.FLOOR,
        "GROWTH": state.GROWTH,
        "EDGE": state.EDGE,
        "EDGE_GROWTH": state.EDGE_GROWTH,
        "EDGE_PLATEAU": state.EDGE_PLATEAU,
        "AT_PACE_MIN": state.AT_PACE_MIN,
        "AT_PACE_MAX": state.AT_PACE_MAX,
        "FAST": state.FAST,
        "SLOW": state.SLOW,
        "PLATEAU": state.PLATEAU,
        "UNPACE": state.UNPACE,
        "MIN_FREE": state.MIN_FREE,
        "LASTING": state.LASTING,
        "MAX_HOLD": state.MAX_HOLD,
        "EPSILON": state.EPSILON,
    }
    folder = resources.files(__package__)
    text = (folder / "common.lua").read_text() + (folder / name).read_text()
    return string.Template(text).substitute({key: repr(value) for key, value in constants.items()})


_SCRIPTS = {"admit": _script("admit.lua"), "apply": _script("apply.lua")}


class PaceStore:
    """One Redis server that processes share their paces through; see the module docstring. A client is made
    per running event loop, as the HTTP session is."""

    def __init__(self, url: str) -> None:
        MissingExtra.check("redis", "a shared pace (`pace_store`)", "redis")
        self.url = validated(url)
        self.name = redacted(url)
        self.member = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"  # this process, among a key's users
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: aioredis.Redis | None = None
        self._scripts: dict[str, AsyncScript] = {}

    def __repr__(self) -> str:
        return f"PaceStore({self.name!r})"

    def client(self) -> aioredis.Redis:
        """The Redis client for the running loop: quick to give up, and never retrying by itself (a script whose
        answer was lost may have run: asking again would count a start twice)."""
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = aioredis.Redis.from_url(
                self.url,
                socket_connect_timeout=_TIMEOUT,
                socket_timeout=_TIMEOUT,
                retry=Retry(NoBackoff(), 0),
                decode_responses=True,
            )
            self._loop = loop
            # Called by digest (EVALSHA), loaded again by itself if the store lost it (a restart, SCRIPT FLUSH).
            self._scripts = {name: self._client.register_script(text) for name, text in _SCRIPTS.items()}
        return self._client

    async def run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        """Run one of the scripts (`admit`, `apply`) on `keys` with `args`."""
        self.client()
        return await self._scripts[script](keys=keys, args=args)

    async def ping(self) -> None:
        """Reach the store and load the scripts; `PaceStoreUnreachable` if it cannot be done."""
        try:
            client = self.client()
            await client.ping()
            for script in _SCRIPTS.values():
                await client.script_load(script)
        except _store_errors(ValueError) as exc:  # ValueError: a URL redis-py cannot read
            raise PaceStoreUnreachable(self.name, _cause(exc)) from None

    def check(self) -> None:
        """`ping` from a thread of its own (so it may be called inside a running loop or outside any), before
        a run sends anything; `PaceStoreUnreachable` if the store cannot be reached."""
        failure: list[BaseException] = []

        def run() -> None:
            async def once() -> None:
                try:
                    await self.ping()
                finally:
                    await self.aclose()

            try:
                asyncio.run(once())
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=run, name="pace-store-check")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]

    def pace(self, slot: str) -> FailoverPace:
        """The shared pace of one key at one endpoint, given as `slot` (a digest of both, never the key)."""
        return FailoverPace(RedisPace(self, slot), self.name)

    async def aclose(self) -> None:
        """Close the client of the running loop, if there is one."""
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None
        self._loop = None


_STORES: dict[str, PaceStore] = {}


def shared_store(url: str) -> PaceStore:
    """The one `PaceStore` of this process for `url`: every client naming it shares its connections."""
    store = _STORES.get(url)
    if store is None:
        store = PaceStore(url)
        _STORES[url] = store
    return store


class RedisPace:
    """One key's pace in the store: `PaceState` through the Lua scripts, one call each."""

    shared = True

    def __init__(self, store: PaceStore, slot: str) -> None:
        self.store = store
        # One hash tag: a Redis Cluster keeps both keys on one node, as a script needs.
        self.keys = [f"healthbench:pace:{{{slot}}}", f"healthbench:pace:{{{slot}}}:processes"]
        self._registered = -_MEMBER_EVERY

    async def admit(self, tokens: float, horizon: float, ahead: Ahead, user: Limits) -> Admission:
        """`PaceState.admit`, on Redis's clock."""
        member = ""
        if time.monotonic() - self._registered >= _MEMBER_EVERY:
            member, self._registered = self.store.member, time.monotonic()
        args = [tokens, horizon, *(_text(seconds) for seconds in ahead), *(_text(value) for value in user), member]
        reply = await self.store.run("admit", self.keys, args)
        wait, reason, reserved, rpm, tpm, requests, tokens_rate, sharers = reply
        return Admission(
            wait=float(wait),
            reason=reason or None,
            reserved=bool(int(reserved)),
            rpm=_number(rpm),
            tpm=_number(tpm),
            request_rate=_number(requests),
            token_rate=_number(tokens_rate),
            sharers=max(1, int(sharers)),
        )

    async def apply(self, effects: Effects) -> None:
        """`PaceState.apply`, on Redis's clock."""
        slow = effects.slow
        hard = "1" if slow and slow.hard else "0"
        args: list[Any] = [_text(effects.hold), _text(slow.share if slow else None), hard, _text(effects.coarse)]
        for learned in effects.learned:
            args += [_DIM[learned.dimension], learned.per_minute, learned.rank]
        await self.store.run("apply", self.keys, args)


_DIM = {"requests": "rpm", "tokens": "tpm"}


class FailoverPace:
    """A `RedisPace` while the store answers, a `LocalPace` stand-in while it does not: see the module
    docstring. The stand-in follows what the store says (limits, factor, the processes sharing the key), so it
    takes over at this process's share."""

    shared = True

    def __init__(self, remote: RedisPace, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.remote = remote
        self.local = LocalPace(clock, shared=True)
        self.name = name
        self._clock = clock
        self._down_since: float | None = None
        self._next_ping = 0.0
        self._pinging: asyncio.Task[None] | None = None
        self._sharers = 1  # the processes using the key, as the store last counted them

    async def admit(self, tokens: float, horizon: float, ahead: Ahead, user: Limits) -> Admission:
        """`PaceState.admit`: the store's, or the stand-in's while the store is out of reach."""
        admission = await self._remote(lambda: self.remote.admit(tokens, horizon, ahead, user))
        if admission is None:
            # The processes the store saw last share the key still: a stand-in is no key of this process's alone.
            return replace(await self.local.admit(tokens, 0.0, ahead, user), sharers=self._sharers)
        self._follow(admission)
        return admission

    async def apply(self, effects: Effects) -> None:
        """`PaceState.apply`, to the stand-in always (so it is current when it takes over) and to the store."""
        await self.local.apply(effects)
        await self._remote(lambda: self.remote.apply(effects))

    def _follow(self, admission: Admission) -> None:
        now = self._clock()
        self._sharers = admission.sharers
        self.local.share = 1 / admission.sharers
        for dimension, value in zip(DIMENSIONS, (admission.rpm, admission.tpm), strict=True):
            if value is not None and self.local.limit(dimension, now) != value:
                self.local.apply_at(now, Effects((Learned(dimension, value, state.HEADERS),)))

    async def _remote(self, call: Callable[[], Awaitable[T]]) -> T | None:
        if self._down_since is not None:
            self._ping_later()
            return None
        try:
            return await call()
        except _store_errors() as exc:
            self._down_since = self._clock()
            self._next_ping = self._down_since + _RETRY_EVERY
            log.warning("pace store %s lost (%s): pacing locally until it is back", self.name, _cause(exc))
            return None

    def _ping_later(self) -> None:
        # In a task of its own: a store that hangs costs no start its timeout.
        if self._clock() >= self._next_ping and (self._pinging is None or self._pinging.done()):
            self._pinging = asyncio.get_running_loop().create_task(self._ping())

    async def _ping(self) -> None:
        try:
            await self.remote.store.client().ping()
            # A restarted store is empty: what this process knows goes back first.
            learned = tuple(Learned(dimension, value, rank) for dimension, (value, rank) in self.local.learned.items())
            await self.remote.apply(Effects(learned))
        except _store_errors():
            self._next_ping = self._clock() + _RETRY_EVERY
            return
        lost_for = self._clock() - (self._down_since or 0.0)
        log.info("pace store %s is back after %.0f s: pacing shared again", self.name, lost_for)
        self._down_since = None


def _text(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _number(text: str) -> float | None:
    return float(text) if text else None


def _cause(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
