"""The server's front door: which environment a request is for, and a clear refusal for a name it does not serve.

The SDK's client names a variant in the path (`/healthbench_answer/tools`) and in `/create`'s `env_name`. TRL
1.16 (and any client built on `environments.get(name)` without `variant=`) calls the bare paths (`/tools`,
`/create`, `/call`, ...) with an `X-Deployment: <name>` header instead, which the stock server reads only as a
metrics label: every such call would land on the default environment. This ASGI middleware, outermost on the
server, sends a bare environment path whose `X-Deployment` names a variant to that variant's path, and gives a
`/create` that names no environment the variant's name.

A name the server does not serve is refused with HTTP 404 naming the environments it serves, and one log line,
rather than served silently by the default environment (whose tools are not the ones the client asked for) or
answered with a bare "Not Found": a first path segment that is neither an environment nor one of the server's
own routes, a `/create` whose `env_name` is none of them, and a bare path whose `X-Deployment` names another
environment. A header that names the deployment as a whole keeps the default environment: `healthbench` itself,
TRL's stand-in `env` (sent when no `env_name` is given), and a platform's `owner/name` (whose name is the
deployment's, chosen by its owner; its variant part still routes). A split the server does not have, in a request
body, is refused with HTTP 400 naming the splits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "x-deployment"
CREATE = "create"
# What TRL's OpenRewardSpec sends as X-Deployment when it is given a URL and no env_name.
TRL_PLACEHOLDER = "env"
# The bare routes whose JSON body names a split.
SPLIT_ROUTES = frozenset({"tasks", "num_tasks", "task", "task_range", CREATE})


def _listed(names: Sequence[str]) -> str:
    quoted = [f"'{name}'" for name in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


class DeploymentRouter:
    """Route by `X-Deployment` and refuse unknown names (see the module docstring).

    `served`: the environments, the default first; `variants`: those the header may choose; `scoped`: the first
    path segments of the per-environment routes (`tools`, `call`, `prompt`, ...), which a bare path starts with;
    `roots`: the first segments of the server's own routes (`health`, `create`, ...); `splits`: the split names;
    `log`: called once per refusal with an event name and its fields.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        served: Sequence[str],
        variants: Collection[str],
        scoped: Collection[str],
        roots: Collection[str],
        splits: Sequence[str],
        log: Callable[..., Any],
    ) -> None:
        self.app = app
        self.served = tuple(served)
        self.variants = frozenset(variants)
        self.scoped = frozenset(scoped)
        self.roots = frozenset(roots)
        self.splits = tuple(splits)
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        first, _, rest = path.strip("/").partition("/")
        first = first.lower()
        if first in self.served:
            route = rest.partition("/")[0].lower()
        elif first in self.scoped or first == CREATE:
            route = first
            named = _header(scope)
            if (refusal := self._unknown(named)) is not None:
                await self._refuse(scope, receive, send, 404, "unknown_environment", refusal, name=named)
                return
            variant = self._variant(named)
            if variant is not None and first != CREATE:
                routed = f"/{variant}{path}"
                scope = {**scope, "path": routed, "raw_path": routed.encode()}
        elif first in self.roots:
            await self.app(scope, receive, send)
            return
        else:
            await self._refuse(scope, receive, send, 404, "unknown_environment", self._unserved(first), name=first)
            return
        if route not in SPLIT_ROUTES or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body, replayed = await _body(scope, receive)
        payload = _json(body)
        if isinstance(payload, dict):
            if route == CREATE and (refusal := self._create_refusal(payload)) is not None:
                await self._refuse(
                    scope, replayed, send, 404, "unknown_environment", refusal, name=payload.get("env_name")
                )
                return
            split = payload.get("split")
            # A `/create` with a task spec of its own is judged by the environment, which names the splits too.
            by_spec = route == CREATE and payload.get("task_spec") is not None
            if isinstance(split, str) and split not in self.splits and not by_spec:
                message = f"no split {_named(split)} here: the splits are {_listed(self.splits)}"
                if split == "train":
                    message += " (HealthBench has no training data: pass split='test')"
                await self._refuse(scope, replayed, send, 400, "unknown_split", message, split=split)
                return
            if route == CREATE and first == CREATE and payload.get("env_name") is None:
                variant = self._variant(_header(scope))
                if variant is not None:
                    body = json.dumps({**payload, "env_name": variant}).encode()
                    scope = {**scope}
                    MutableHeaders(scope=scope)["content-length"] = str(len(body))  # a copy of the headers
                    await self.app(scope, replay([whole(body)], receive), send)
                    return
        await self.app(scope, replayed, send)

    def _unserved(self, name: str) -> str:
        return (
            f"no environment {_named(name)} here: this server serves {_listed(self.served)} (name one in the path, "
            "as the SDK's variant=, or in the X-Deployment header)"
        )

    def _unknown(self, named: str | None) -> str | None:
        """Why the `X-Deployment` name of a bare path is refused, or None: no header, a platform's `owner/name`, a
        served environment, and TRL's placeholder all pass."""
        if named is None or "/" in named or named.lower() in {*self.served, TRL_PLACEHOLDER}:
            return None
        return self._unserved(named)

    def _variant(self, named: str | None) -> str | None:
        """The variant an `X-Deployment` name chooses (case-insensitive; a platform's `owner/` prefix dropped)."""
        if named is None:
            return None
        wanted = named.rsplit("/", 1)[-1].lower()
        return wanted if wanted in self.variants else None

    def _create_refusal(self, payload: dict[str, Any]) -> str | None:
        name = payload.get("env_name")
        if isinstance(name, str) and name.lower() not in self.served:
            return self._unserved(name)
        return None

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, event: str, message: str, **fields: Any
    ) -> None:
        self.log(event, status=status, path=scope["path"], detail=message, **fields)
        await JSONResponse({"detail": message}, status_code=status)(scope, receive, send)


def _named(name: str) -> str:
    """A name a client sent, quoted for a refusal: its first 100 characters (the refusal goes back to it and to the
    log, and the name may be anything)."""
    return repr(name) if len(name) <= 100 else f"{name[:100]!r}... ({len(name):,} characters)"


def _header(scope: Scope) -> str | None:
    """The request's `X-Deployment` value, stripped; None when it has none (or a blank one)."""
    return Headers(scope=scope).get(HEADER, "").strip() or None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
        return None  # not ours to judge: the server answers a broken body with its own 422


async def _body(scope: Scope, receive: Receive) -> tuple[bytes, Receive]:
    """The request's whole body, and a receive channel that gives it again."""
    try:
        body = await Request(scope, receive).body()
    except ClientDisconnect:
        # The client went away mid-body: let the server see that as it would have.
        return b"", replay([{"type": "http.disconnect"}], receive)
    return body, replay([whole(body)], receive)


def whole(body: bytes) -> Message:
    """A receive message that carries all of `body`."""
    return {"type": "http.request", "body": body, "more_body": False}


def replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive channel that gives `messages` first, then whatever the original channel gives."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
