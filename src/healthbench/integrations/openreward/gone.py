"""A request served only while its client waits for the answer: when the client goes away first, what serving it
does (the grading of a step's replies, its grader calls) is cancelled rather than paid for nobody.

uvicorn tells an app that its client has gone by what `receive` returns once the body is read: it waits until the
connection is lost (then `http.disconnect`) or the answer is sent. Starlette and FastAPI do not listen for that
while a handler runs, so a request whose client gave up (OpenRLHF's 180 s timeout, `curl -m`) ran to its end, every
grader call paid and the answer thrown away. `wanted` listens for it beside the app.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def wanted(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> bool:
    """Serve the request with `app`; True once served, False when its client went away before the answer began
    (the app is then cancelled and awaited, so nothing it started outlives it). The app reads the body as ever;
    after the body, what `receive` returns is watched here, and handed to the app if it asks."""
    body_read = asyncio.Event()
    started = False
    after_body: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

    async def receiving() -> Message:
        if body_read.is_set():
            return await asyncio.shield(after_body)
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            body_read.set()
        return message

    async def sending(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    async def watch() -> None:
        await body_read.wait()
        after_body.set_result(await receive())

    serving = asyncio.ensure_future(app(scope, receiving, sending))
    watching = asyncio.ensure_future(watch())
    try:
        await asyncio.wait([serving, watching], return_when=asyncio.FIRST_COMPLETED)
        gone = after_body.done() and after_body.result()["type"] == "http.disconnect" and not started
        if gone and not serving.done():
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            return False
        await serving
        return True
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        if not serving.done():  # this request's own task was cancelled (the server stopping)
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
