"""Reaching a variant by the `X-Deployment` header: how TRL's `OpenRewardSpec(url, env_name=...)` names one.

The SDK's client names a variant in the path (`/healthbench_answer/tools`) and in `/create`'s `env_name`. TRL
1.16 (and any client built on `environments.get(name)` without `variant=`) calls the bare paths (`/tools`,
`/create`, `/call`, ...) with an `X-Deployment: <name>` header instead, which the stock server reads only as a
metrics label: every such call lands on the default environment. This ASGI middleware, outermost on the
server, sends a bare environment path whose `X-Deployment` names a variant to that variant's path, and gives a
`/create` that names no environment the variant's name. Everything else passes through untouched: a path that
already names an environment, a `/create` that names one, and a header naming no variant (the deployment's own
name `healthbench`, an `owner/` platform name of it, TRL's default `env`), which keeps the default environment.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-deployment"
CREATE = "/create"


def named_variant(scope: Scope, variants: Collection[str]) -> str | None:
    """The variant the request's `X-Deployment` header names (case-insensitive; a platform's `owner/` prefix
    dropped), if any."""
    for name, value in scope.get("headers", ()):
        if name.lower() == HEADER:
            wanted = value.decode("latin-1").strip().rsplit("/", 1)[-1].lower()
            return wanted if wanted in variants else None
    return None


class DeploymentRouter:
    """Route bare environment paths and `/create` by the `X-Deployment` header (see the module docstring).

    `variants`: the environment names the header may choose (lower case); `scoped`: the first path segments of
    the server's per-environment routes (`tools`, `call`, `prompt`, ...), which a bare path starts with.
    """

    def __init__(self, app: ASGIApp, variants: Collection[str], scoped: Collection[str]) -> None:
        self.app = app
        self.variants = frozenset(variants)
        self.scoped = frozenset(scoped)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        variant = named_variant(scope, self.variants) if scope["type"] == "http" else None
        if variant is None:
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.strip("/").split("/", 1)[0] in self.scoped:
            routed = f"/{variant}{path}"
            scope = {**scope, "path": routed, "raw_path": routed.encode()}
        elif path.rstrip("/") == CREATE and scope.get("method") == "POST":
            scope, receive = await _create_in(variant, scope, receive)
        await self.app(scope, receive, send)


async def _create_in(variant: str, scope: Scope, receive: Receive) -> tuple[Scope, Receive]:
    """A `/create` request whose body names `variant` as its environment unless it names one already."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            # The client went away mid-body: let the server see that as it would have.
            return scope, _replay([message], receive)
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    try:
        payload: Any = json.loads(body)
    except ValueError:
        payload = None  # not ours to judge: the server answers a broken body with its own 422
    if isinstance(payload, dict) and payload.get("env_name") is None:
        body = json.dumps({**payload, "env_name": variant}).encode()
        headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
    return scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive channel that gives `messages` first, then whatever the original channel gives."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
