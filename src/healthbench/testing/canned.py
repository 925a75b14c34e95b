"""One answer to every request on every path, live and Batch API alike: an endpoint that is not the API it claims to
be (an HTML page, `{}`, a 500, a 401, or no answer at all), for tests of what a client makes of it."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web


@dataclass(frozen=True)
class Canned:
    """The answer: `status` None is a server that takes each request and never answers it."""

    status: int | None = 200
    body: str = ""
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


class CannedHost(Protocol):
    """What the middleware needs of its server (``FakeOpenAI``): the answer, if any, and the counters it adds to."""

    canned: Canned | None
    requests_total: int
    responses_by_kind: Counter[str]


class CannedAnswers:
    """The middleware that gives every request its server's `canned` answer, while it has one."""

    def __init__(self, server: CannedHost) -> None:
        self._server = server
        self._hung: set[asyncio.Future[None]] = set()

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Answer with the canned answer, counted as `canned`; without one, let the server answer."""
        server = self._server
        canned = server.canned
        if canned is None:
            return await handler(request)
        server.requests_total += 1
        server.responses_by_kind["canned"] += 1
        await request.read()
        if canned.status is None:
            hung = asyncio.get_running_loop().create_future()
            self._hung.add(hung)
            try:
                await hung
            finally:
                self._hung.discard(hung)
        return web.Response(
            status=canned.status or 200, text=canned.body, content_type=canned.content_type, headers=canned.headers
        )

    def release(self) -> None:
        """End the requests held unanswered (the server is stopping)."""
        for hung in self._hung:
            hung.cancel()
