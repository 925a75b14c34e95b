"""The server's outermost door: a request is let in only with a token of the server's (when it has tokens), with a
body no larger than its bound, and, for a session, with the credential that created the session.

An ASGI middleware in front of the SDK's app (and of `routing`), so nothing behind it (no grader call, no session,
no body parsed) happens for a request it refuses:

- Every request but `/health` carries a token as `X-API-Key` (what the OpenReward SDK's client sends from its
  `api_key` or `OPENREWARD_API_KEY`) or `Authorization: Bearer`; without one, or with one that is not the
  server's, HTTP 401 with a one-line JSON error.
- A body above the bound is refused with 413: at once when its `Content-Length` says so (nothing of it is read),
  else as soon as the bytes read pass the bound (a chunked body is held, up to the bound, then handed on).
- With tokens, a session (`X-Session-ID`) belongs to the credential whose `/create` made it: a request for it with
  another credential is refused with 403, so a session's grader key is spent only by its own credential. A
  `/create` of an id already taken, or being created, by another credential is refused too.
- `X-Session-ID` and `X-Secrets` that the SDK's server would fail on with a traceback (an id of thousands of
  characters, secrets that are not base64 JSON) get 400 naming the header.

The SDK's server forgets a session after 15 minutes without a request for it; the owner of one is forgotten
after the same time without a request, twice over, and when it is deleted.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import structlog
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from healthbench.integrations.openreward.access import ServerTokens
from healthbench.integrations.openreward.routing import replay, whole

# The credential of the request being served (`token N`), or None on a server without tokens: read by the
# environment for its `session_created` line.
CALLER: ContextVar[str | None] = ContextVar("healthbench_caller", default=None)
OPEN_PATHS = frozenset({"/health"})
MAX_SESSION_ID_CHARS = 256
# The SDK's server deletes a session 900 s after its last request (its reaper's `stale_threshold`); an owner is
# kept for twice that, so it outlives every session it could be asked about.
OWNER_IDLE_S = 2 * 900.0
PRUNE_EVERY_S = 60.0
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
CREATE, DELETE = "create", "delete"
NEEDS_TOKEN = (
    "this server needs its token: send it as the X-API-Key header (the OpenReward SDK client's api_key, or "
    "OPENREWARD_API_KEY) or as Authorization: Bearer <token>"
)


def short_id(session_id: str) -> str:
    """A session id as the log shows it: its first 8 characters (half of a shorter one), then an ellipsis."""
    keep = min(8, len(session_id) // 2)
    return session_id[:keep] + "…" if session_id else ""


@dataclass
class _Owner:
    credential: str | None
    seen: float
    creating: bool


class Guard:
    """Tokens, a body bound and session owners, in front of `app` (see the module docstring). `tokens`: None
    lets every request in, and then sessions are not told apart by credential; `log`: called once per refusal
    with an event name and its fields."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: ServerTokens | None,
        max_body: int,
        log: Callable[..., Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.max_body = max_body
        self.log = log
        self.clock = clock
        self._owners: dict[str, _Owner] = {}
        self._pruned = clock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The log's request context (the SDK binds it further in): none of an earlier request's in this one's lines.
        structlog.contextvars.clear_contextvars()
        headers = Headers(scope)
        credential = None
        if self.tokens is not None and scope["path"] not in OPEN_PATHS:
            presented = headers.token()
            credential = self.tokens.credential(presented)
            if credential is None:
                said = NEEDS_TOKEN if presented is None else "the token sent is not this server's: " + NEEDS_TOKEN
                reason = "no token" if presented is None else "a token that is not this server's"
                await self._refuse(scope, receive, send, 401, "request_unauthorized", said, reason=reason)
                return
        refusal = headers.refusal(scope["path"])
        if refusal is not None:
            await self._refuse(scope, receive, send, 400, "request_refused", refusal)
            return
        length = headers.first("content-length")
        if length is not None and int(length) > self.max_body:
            await self._too_large(scope, receive, send, int(length))
            return
        if length is None and scope.get("method") in BODY_METHODS:
            body = await self._bounded_body(receive)
            if body is None:
                await self._too_large(scope, receive, send, None)
                return
            receive = replay([whole(body)], receive)
        session = (headers.first("x-session-id") or "").strip()
        reset = CALLER.set(credential)
        try:
            if self.tokens is not None and session:
                await self._owned(scope, receive, send, session, credential)
            else:
                await self.app(scope, receive, send)
        finally:
            CALLER.reset(reset)

    async def _owned(self, scope: Scope, receive: Receive, send: Send, session: str, credential: str | None) -> None:
        """Serve a request for `session` if `credential` owns it (or, for `/create`, may take it)."""
        route = scope["path"].rstrip("/").rsplit("/", 1)[-1].lower()
        now = self.clock()
        self._prune(now)
        owner = self._owners.get(session)
        shown = short_id(session)
        if owner is not None and owner.credential != credential:
            said = f"session {shown} was created with another token: a session is used with the token that created it"
            await self._refuse(scope, receive, send, 403, "session_refused", said, session_id=shown)
            return
        if route == CREATE and owner is not None and owner.creating:
            said = f"session {shown} is being created by another request"
            await self._refuse(scope, receive, send, 409, "session_refused", said, session_id=shown)
            return
        creating = route == CREATE and owner is None
        if owner is None:
            if not creating:  # a session the SDK does not have either: its 404 says so
                await self.app(scope, receive, send)
                return
            owner = _Owner(credential, now, creating=True)
            self._owners[session] = owner
        owner.seen = now
        statuses: list[int] = []

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            done = bool(statuses) and 200 <= statuses[0] < 300
            if creating and done:
                owner.creating = False
            elif creating or (route == DELETE and done):
                self._owners.pop(session, None)  # not made, or deleted: the id is free again

    def _prune(self, now: float) -> None:
        """Forget owners whose sessions the SDK has forgotten: no request for them for `OWNER_IDLE_S`."""
        if now - self._pruned < PRUNE_EVERY_S:
            return
        self._pruned = now
        stale = [sid for sid, owner in self._owners.items() if now - owner.seen > OWNER_IDLE_S and not owner.creating]
        for sid in stale:
            del self._owners[sid]

    async def _bounded_body(self, receive: Receive) -> bytes | None:
        """A body sent without a length, read up to the bound: its bytes, or None once it passes the bound."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)  # the client went away: what came is handed on, and the server sees it go
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, length: int | None) -> None:
        size = f"more than {self.max_body:,} bytes" if length is None else f"{length:,} bytes"
        said = f"the request body is {size}: this server takes at most {self.max_body:,} (serve --max-request-bytes)"
        await self._refuse(scope, receive, send, 413, "request_too_large", said, bytes=length, limit=self.max_body)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, event: str, said: str, **fields: Any
    ) -> None:
        self.log(event, status=status, method=scope.get("method"), path=scope["path"], detail=said, **fields)
        response = JSONResponse({"detail": said}, status_code=status)
        if status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="healthbench"'
        if status == 413:
            response.headers["Connection"] = "close"  # the rest of the body is never read
        await response(scope, receive, send)


class Headers:
    """A request's headers by lower-case name, each with every value it was given, in order."""

    def __init__(self, scope: Scope) -> None:
        self.values: dict[str, list[str]] = {}
        for raw, value in scope.get("headers", ()):
            self.values.setdefault(raw.decode("latin-1").lower(), []).append(value.decode("latin-1"))

    def first(self, name: str) -> str | None:
        """The first value of header `name` (what the SDK's server reads of a repeated one), or None."""
        given = self.values.get(name)
        return given[0] if given else None

    def token(self) -> str | None:
        """The token the request carries: its `X-API-Key`, else its `Authorization: Bearer` credential."""
        key = (self.first("x-api-key") or "").strip()
        if key:
            return key
        scheme, _, credential = (self.first("authorization") or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        return credential.strip() or None

    def refusal(self, path: str) -> str | None:
        """Why the request's headers cannot be used, or None: a length that is none, a session id given twice
        or too long, `/create`'s secrets that are not what the SDK's client sends."""
        for name in ("content-length", "x-session-id"):
            if len(self.values.get(name, ())) > 1:
                return f"the {name} header is given more than once"
        length = self.first("content-length")
        if length is not None and not re.fullmatch(r"\s*[0-9]+\s*", length):
            return f"Content-Length {length[:40]!r} is not a length"
        session = self.first("x-session-id") or ""
        if len(session) > MAX_SESSION_ID_CHARS:
            return f"X-Session-ID is {len(session):,} characters long: at most {MAX_SESSION_ID_CHARS}"
        secrets = self.first("x-secrets")
        if secrets and path.rstrip("/").lower() == f"/{CREATE}":
            return _secrets_refusal(secrets)
        return None


def _secrets_refusal(header: str) -> str | None:
    """Why an `X-Secrets` value is not the SDK client's (base64 of `{"NAME": {"value": "..."}, ...}`), or None."""
    try:
        payload = json.loads(base64.b64decode(header, validate=True))
    except (binascii.Error, ValueError, RecursionError):
        return "X-Secrets is not base64 of a JSON object (the SDK client's secrets= makes it)"
    entries = payload.values() if isinstance(payload, dict) else [None]
    if not all(isinstance(entry, dict) and isinstance(entry.get("value"), str) for entry in entries):
        return 'X-Secrets is not a JSON object of {"NAME": {"value": "..."}} (the SDK client\'s secrets= makes it)'
    return None
