"""What graders and policies call: one model request, its answer parsed, with what it cost.

`Completer.complete` is the call, written once: it reads what the caller gave (a body, or its JSON bytes and
perhaps the body they encode) into a `Request`, and hands that to the client's own way of sending it
(`_complete`): live through `client.ApiClient`, or through the Batch API with `batch.BatchClient`.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from healthbench.api.wire import Usage

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the caller gave it: the JSON bytes that are sent, the body they encode when the caller has
    it (`body`: None when only the bytes were given), the `ident` that tells it apart from requests with equal
    bytes, and its `affinity`: what it shares with its siblings (a reply's rubric items share the conversation),
    so that a pool of servers sends them to one server, whose prefix cache serves them."""

    payload: bytes
    body: Mapping[str, Any] | None
    ident: str | None
    affinity: str | None = None

    def parsed(self) -> Mapping[str, Any]:
        """The body the bytes encode: as the caller gave it, or read from them."""
        return self.body if self.body is not None else json.loads(self.payload)


class Completer(abc.ABC):
    """What graders and policies call: one model request, its answer parsed, with what it cost.

    `ApiClient` sends it live; `batch.BatchClient` sends it through the Batch API. `ident` tells apart
    requests with equal bodies that must each get an answer of their own (repeats of a policy sample).
    """

    async def complete(
        self,
        body: Mapping[str, Any] | bytes,
        parse: Callable[[str], T],
        *,
        ident: str | None = None,
        parsed: Mapping[str, Any] | None = None,
        affinity: str | None = None,
    ) -> tuple[T, Usage]:
        """Send one request and parse its content; raise `RequestFailed` past the retry bound. `parsed` is the
        object that `body`'s bytes encode, when the caller has it: it spares parsing them again. Requests of one
        `affinity` go to one server of a pool where they can (`Request`)."""
        if isinstance(body, bytes):
            request = Request(body, parsed, ident, affinity)
        else:
            request = Request(json.dumps(body).encode(), body if parsed is None else parsed, ident, affinity)
        return await self._complete(request, parse)

    @abc.abstractmethod
    async def _complete(self, request: Request, parse: Callable[[str], T]) -> tuple[T, Usage]:
        """How this client sends `request` and parses its answer's content with `parse`."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections."""
