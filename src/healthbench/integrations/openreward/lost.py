"""A session the server does not have, said as what it is: lost, with its id and the server's start.

The SDK's server keeps its sessions in memory: restarted (a deploy, a crash, an OOM kill) it has none of them, and
it forgets one idle for 15 minutes. A trainer's next call on such a session got the SDK's bare 404 "Active
environment not found", which names neither the session nor why. This middleware, in front of the SDK's app,
answers that 404 of a request that names a session with 410 Gone and a message naming the session, when this
server process started, and that a new session works at once. 410 is the SDK client's own word for a session that
is gone: its streaming tool calls raise `SessionTerminatedError` on it, its other calls an error with the message.
Nothing of a lost session is graded, so no reward is ever given for a reply this server did not grade.
"""

from __future__ import annotations

import json
import os
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from healthbench.integrations.openreward.guard import short_id

SDK_NOT_FOUND = "Active environment not found"
GONE = 410
# The SDK's answer is a short JSON object: a body longer than this is some other 404, passed on as it came.
MAX_HELD = 4096


def lost_detail(session: str, started: float, pid: int) -> str:
    """What a client is told of `session`, which this server (process `pid`, started at `started`, a Unix time)
    does not have."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
    return (
        f"session {short_id(session)} is not open on this server (process {pid}, started {when}): a restarted server "
        "has none of the sessions it had, and one idle for 15 minutes is closed. Nothing more of it is graded and no "
        "reward is given for it; create a new session, which works at once"
    )


class LostSessions:
    """The SDK's 404 for a session it does not have, answered as 410 naming the session (see the module)."""

    def __init__(self, app: ASGIApp, *, started: float | None = None) -> None:
        self.app = app
        self.started = time.time() if started is None else started
        self.pid = os.getpid()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = _session_of(scope)
        if scope["type"] != "http" or not session:
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def watched(message: Message) -> None:
            if held or (message["type"] == "http.response.start" and message["status"] == 404):
                held.append(message)
                if message["type"] == "http.response.body" and not message.get("more_body", False):
                    await self._answer(held, session, send)
                return
            await send(message)

        await self.app(scope, receive, watched)

    async def _answer(self, held: list[Message], session: str, send: Send) -> None:
        """Send the held 404: as 410 naming the session when it is the SDK's "Active environment not found"."""
        body = b"".join(message.get("body", b"") for message in held[1:])
        if len(body) <= MAX_HELD and _detail(body) == SDK_NOT_FOUND:
            said = json.dumps({"detail": lost_detail(session, self.started, self.pid)}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(said)).encode())]
            await send({"type": "http.response.start", "status": GONE, "headers": headers})
            await send({"type": "http.response.body", "body": said})
            return
        for message in held:
            await send(message)


def _session_of(scope: Scope) -> str:
    """The request's `X-Session-ID` (its first), "" without one."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"x-session-id":
            return str(value.decode("latin-1").strip())
    return ""


def _detail(body: bytes) -> object:
    """The `detail` of a JSON error body, or None."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value.get("detail") if isinstance(value, dict) else None
