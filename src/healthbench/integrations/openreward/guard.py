"""The server's outermost door: a request is let in only with a token of the server's (when it has tokens), with a
body no larger than its bound, and, for a session, with the credential that created the session.

An ASGI middleware in front of the SDK's app (and of `routing`), so nothing behind it (no grader call, no session,
no body parsed) happens for a request it refuses:

- Every request but `/health` carries a token as `X-API-Key` (what the OpenReward SDK's client sends from its
  `api_key` or `OPENREWARD_API_KEY`), `Authorization: Bearer`, or HTTP Basic auth whose password is the token (the
  user name is ignored): OpenRLHF's reward client sends no header of its own, and a URL's
  `http://user:TOKEN@host` is the one way it carries a token (aiohttp sends it as Basic). Without one, or with one
  that is not the server's, HTTP 401 with a one-line JSON error.
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
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
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
    "OPENREWARD_API_KEY), as Authorization: Bearer <token>, or in the URL as http://user:<token>@host:port/... "
    "(HTTP Basic, what OpenRLHF's --reward.remote_url sends)"
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
        headers = Headers(scope=scope)
        credential = None
        if self.tokens is not None and scope["path"] not in OPEN_PATHS:
            presented = presented_token(headers)
            credential = self.tokens.credential(presented)
            if credential is None:
                said = NEEDS_TOKEN if presented is None else "the token sent is not this server's: " + NEEDS_TOKEN
                reason = "no token" if presented is None else "a token that is not this server's"
                await self._refuse(scope, receive, send, 401, "request_unauthorized", said, reason=reason)
                return
        refusal = header_refusal(headers, scope["path"])
        if refusal is not None:
            await self._refuse(scope, receive, send, 400, "request_refused", refusal)
            return
        length = headers.get("content-length")
        if length is not None and int(length) > self.max_body:
            await self._too_large(scope, receive, send, int(length))
            return
        if length is None and scope.get("method") in BODY_METHODS:
            bounded = await self._bounded_body(scope, receive)
            if bounded is None:
                await self._too_large(scope, receive, send, None)
                return
            receive = bounded
        session = headers.get("x-session-id", "").strip()
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

    async def _bounded_body(self, scope: Scope, receive: Receive) -> Receive | None:
        """A body sent without a length, read up to the bound: a receive channel that gives it again, or None
        once it passes the bound."""
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in Request(scope, receive).stream():
                size += len(chunk)
                if size > self.max_body:
                    return None
                chunks.append(chunk)
        except ClientDisconnect:
            # The client went away: what came is handed on, and the server sees it go.
            came: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": True}
            return replay([came, {"type": "http.disconnect"}], receive)
        return replay([whole(b"".join(chunks))], receive)

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


def presented_token(headers: Headers) -> str | None:
    """The token a request carries: its `X-API-Key` (the first given, as the SDK's server reads a repeated header),
    else its `Authorization` credential: a Bearer token, or the password of Basic auth."""
    key = headers.get("x-api-key", "").strip()
    if key:
        return key
    scheme, _, credential = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer":
        return credential.strip() or None
    if scheme.lower() == "basic":
        return _basic_password(credential.strip())
    return None


def _basic_password(encoded: str) -> str | None:
    """The password of a Basic credential (base64 of `user:password`), or None for one that is not that.
    aiohttp sends a URL's userinfo in UTF-8 or Latin-1: a token is ASCII, so both read the same."""
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("latin-1")
    except (binascii.Error, ValueError):
        return None
    _, colon, password = decoded.partition(":")
    return (password.strip() or None) if colon else None


def header_refusal(headers: Headers, path: str) -> str | None:
    """Why the request's headers cannot be used, or None: a length that is none, a session id given twice or too
    long, `/create`'s secrets that are not what the SDK's client sends."""
    for name in ("content-length", "x-session-id"):
        if len(headers.getlist(name)) > 1:
            return f"the {name} header is given more than once"
    length = headers.get("content-length")
    if length is not None and not re.fullmatch(r"\s*[0-9]+\s*", length):
        return f"Content-Length {length[:40]!r} is not a length"
    session = headers.get("x-session-id", "")
    if len(session) > MAX_SESSION_ID_CHARS:
        return f"X-Session-ID is {len(session):,} characters long: at most {MAX_SESSION_ID_CHARS}"
    secrets = headers.get("x-secrets")
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
