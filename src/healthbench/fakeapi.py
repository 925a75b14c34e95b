"""A fake OpenAI-compatible chat-completions server for tests and benchmarks.

It is a real HTTP server on loopback (no mocks), so clients exercise their actual networking,
retry and parsing code. Replies are deterministic: grader prompts get a verdict that is a pure
function of the prompt text, everything else gets a reply derived from the messages. Faults and
rate limiting can be injected deterministically from a seed.

Run it standalone with ``python -m healthbench.fakeapi --port 8000``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from healthbench.fakebatch import FakeBatchAPI

__all__ = [
    "FAULT_KINDS",
    "GRADER_MARKER",
    "FakeOpenAI",
    "main",
    "policy_reply",
    "prompt_verdict",
    "verdict_reply",
]

GRADER_MARKER = "# Rubric item"
FAULT_KINDS: tuple[str, ...] = (
    "429",
    "500",
    "503",
    "drop",
    "badjson",
    "prose",
    "null",
    "empty",
    "string_verdict",
)

_PROSE = "The response seems reasonable overall and I would say it mostly meets the criterion."
_STRING_VERDICT = '```json\n{"explanation": "fake verdict", "criteria_met": "true"}\n```'
# Built once: every grader request needs one of these two strings.
_VERDICT_REPLIES = {
    met: "```json\n" + json.dumps({"explanation": "fake verdict", "criteria_met": met}) + "\n```"
    for met in (True, False)
}
# Truncated mid-document, as a proxy cutting the body short would leave it.
_BAD_JSON = '{"id": "chatcmpl-fake", "object": "chat.completion", "choices": [{"index": 0, "mess'
# Generous so long grader prompts never hit aiohttp's 1 MiB default and turn into 413s.
_CLIENT_MAX_SIZE = 64 * 1024 * 1024
# Bounds how long stop() waits for handlers still sleeping out their latency.
_SHUTDOWN_TIMEOUT = 2.0

Body = dict[str, Any]


def prompt_verdict(text: str) -> bool:
    """Return the default ``criteria_met`` verdict for a grader prompt: a pure function of its text."""
    return hashlib.sha256(text.encode()).digest()[0] % 2 == 0


def verdict_reply(criteria_met: bool) -> str:
    """Return a grader reply in the HealthBench format (a markdown-fenced JSON object)."""
    return _VERDICT_REPLIES[criteria_met]


def policy_reply(messages: Sequence[Any]) -> str:
    """Return the default reply to a non-grader (policy) request: a hash of its messages."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    return "Fake reply " + digest[:16]


def _estimate_tokens(chars: int) -> int:
    return chars // 4 + 1


def _error_body(message: str, error_type: str) -> Body:
    return {"error": {"message": message, "type": error_type, "param": None, "code": None}}


def _error(status: int, message: str, error_type: str, headers: dict[str, str] | None = None) -> web.Response:
    body = _error_body(message, error_type)
    return web.Response(status=status, text=json.dumps(body), content_type="application/json", headers=headers)


def _chat_messages(body: Any) -> list[Body] | None:
    """Return the request's messages, or None if they are not a non-empty list of objects."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
        return messages
    return None


class _TokenBucket:
    """Allows ``rate`` requests per second with a burst of one second's worth."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.updated = now

    def take(self, now: float) -> float:
        """Consume a token and return 0, or return the seconds until one becomes available."""
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate

    def headers(self, wait: float) -> dict[str, str]:
        # Until the bucket is full again, mirroring OpenAI's "time until the limit resets".
        reset = max(wait, (self.capacity - self.tokens) / self.rate)
        return {
            "x-ratelimit-limit-requests": str(math.floor(self.capacity)),
            "x-ratelimit-remaining-requests": str(math.floor(self.tokens)),
            "x-ratelimit-reset-requests": f"{math.ceil(reset * 1000)}ms",
        }


class FakeOpenAI:
    """A fake chat-completions server; see the module docstring.

    ``responses_by_kind`` counts answers by kind: ``"ok"``, each fault name in ``FAULT_KINDS``,
    ``"fail_always"``, ``"rate_limited"`` and ``"bad_request"``. Counters are only mutated on the
    server's event loop; read them (or call ``reset()``) while no requests are in flight. The
    ``respond`` and ``fail_always`` hooks run on that loop too, so they must be quick and not block.

    It also fakes the Batch API (files and batches, see ``healthbench.fakebatch``), configured by the
    ``batch_*`` and ``max_*`` arguments and counted in ``batches_created``, ``batch_lines_submitted``,
    ``batch_bodies`` and ``files_uploaded``. Batches never touch the live counters above.
    """

    def __init__(
        self,
        *,
        respond: Callable[[Body], str | None] | None = None,
        fault_rate: float = 0.0,
        faults: Sequence[str] = (),
        seed: int = 0,
        fail_always: Callable[[Body], bool] | None = None,
        rate_limit: float | None = None,
        latency: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
        batch_delay: float = 0.0,
        batch_fail_rate: float = 0.0,
        batch_malformed_rate: float = 0.0,
        batch_fail_always: Callable[[Body], bool] | None = None,
        max_file_bytes: int = 200 * 1024 * 1024,
        max_batch_requests: int = 50_000,
        batch_token_limit: int | None = None,
    ) -> None:
        from healthbench.fakebatch import FakeBatchAPI  # fakebatch imports this module

        unknown = sorted(set(faults) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(f"unknown faults {unknown}; choose from {FAULT_KINDS}")
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError("fault_rate must be between 0 and 1")
        if fault_rate > 0 and not faults:
            raise ValueError("fault_rate > 0 needs at least one fault kind")
        if rate_limit is not None and rate_limit <= 0:
            raise ValueError("rate_limit must be positive")
        if latency < 0:
            raise ValueError("latency must be non-negative")
        if batch_delay < 0:
            raise ValueError("batch_delay must be non-negative")
        if not (0.0 <= batch_fail_rate <= 1.0 and 0.0 <= batch_malformed_rate <= 1.0):
            raise ValueError("batch_fail_rate and batch_malformed_rate must be between 0 and 1")
        if max_file_bytes <= 0 or max_batch_requests <= 0:
            raise ValueError("max_file_bytes and max_batch_requests must be positive")
        self.respond = respond
        self.fault_rate = fault_rate
        self.faults = tuple(faults)
        self.seed = seed
        self.fail_always = fail_always
        self.rate_limit = rate_limit
        self.latency = latency
        self.host = host
        self.port = port
        # A long benchmark run would otherwise keep every prompt alive, and the garbage collector's
        # full passes over that heap show up as latency.
        self.record = record
        self.batch_delay = batch_delay
        self.batch_fail_rate = batch_fail_rate
        self.batch_malformed_rate = batch_malformed_rate
        self.batch_fail_always = batch_fail_always
        self.max_file_bytes = max_file_bytes
        self.max_batch_requests = max_batch_requests
        # The organization's enqueued-token limit: a batch that would pass it fails, as OpenAI's do.
        self.batch_token_limit = batch_token_limit
        # Files and batches live as long as the server, across reset(), like the real service's.
        self.batch_api: FakeBatchAPI = FakeBatchAPI(self)
        self.base_url: str | None = None
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    def reset(self) -> None:
        """Clear counters and records, and restart the fault RNGs and rate limiter from scratch.

        Uploaded files and created batches are kept.
        """
        self.requests_total = 0
        self.responses_by_kind: Counter[str] = Counter()
        self.max_in_flight = 0
        self.bodies: list[Body] = []
        self.auth_headers: list[str | None] = []
        self._in_flight = 0
        self._rng = random.Random(self.seed)
        self._bucket = None if self.rate_limit is None else _TokenBucket(self.rate_limit, time.monotonic())
        self.batches_created = 0
        self.batch_lines_submitted = 0
        self.batch_bodies: list[str] = []
        self.files_uploaded = 0
        self.batch_api.reset()

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests_total += 1
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            return await self._answer(request)
        finally:
            self._in_flight -= 1

    async def _answer(self, request: web.Request) -> web.Response:
        self.auth_headers.append(request.headers.get("Authorization"))
        try:
            body = json.loads(await request.read())
        except ValueError:
            self.responses_by_kind["bad_request"] += 1
            return _error(400, "request body is not valid JSON", "invalid_request_error")
        if isinstance(body, dict) and self.record:
            self.bodies.append(body)
        messages = _chat_messages(body)
        if messages is None:
            self.responses_by_kind["bad_request"] += 1
            return _error(400, "'messages' must be a non-empty list of objects", "invalid_request_error")

        rate_headers: dict[str, str] = {}
        if self._bucket is not None:
            wait = self._bucket.take(time.monotonic())
            rate_headers = self._bucket.headers(wait)
            if wait > 0:
                # Answered at once: a real limiter rejects before doing any work.
                self.responses_by_kind["rate_limited"] += 1
                retry_after = f"{math.ceil(wait * 1000) / 1000:g}"
                headers = {"Retry-After": retry_after, **rate_headers}
                return _error(429, "Rate limit reached for requests", "requests", headers)

        if self.fail_always is not None and self.fail_always(body):
            kind = "fail_always"
        elif self.fault_rate > 0 and self._rng.random() < self.fault_rate:
            kind = self._rng.choice(self.faults)
        else:
            kind = "ok"
        self.responses_by_kind[kind] += 1
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        response = self._respond(kind, request, body, messages)
        response.headers.update(rate_headers)
        return response

    def _respond(self, kind: str, request: web.Request, body: Body, messages: list[Body]) -> web.Response:
        content: str | None
        if kind == "ok":
            content = self._ok_content(body, messages)
        elif kind in ("prose", "fail_always"):
            content = _PROSE
        elif kind == "null":
            content = None
        elif kind == "empty":
            content = ""
        elif kind == "string_verdict":
            content = _STRING_VERDICT
        elif kind == "429":
            return _error(429, "Rate limit reached (injected)", "requests", {"Retry-After": "0"})
        elif kind in ("500", "503"):
            return _error(int(kind), f"Injected {kind} error", "server_error")
        elif kind == "badjson":
            return web.Response(text=_BAD_JSON, content_type="application/json")
        else:  # "drop"
            if request.transport is not None:
                request.transport.close()
            # Never reaches the client: aiohttp discards writes to a closed transport.
            return web.Response()
        payload = self._completion_payload(body, messages, content, f"chatcmpl-fake-{self.requests_total}")
        return web.Response(text=json.dumps(payload), content_type="application/json")

    def _ok_content(self, body: Body, messages: list[Body]) -> str | None:
        """The reply when nothing is injected: shared by live requests and batch lines."""
        content = self.respond(body) if self.respond is not None else None
        if content is None:
            last = messages[-1].get("content")
            if isinstance(last, str) and GRADER_MARKER in last:
                content = verdict_reply(prompt_verdict(last))
            else:
                content = policy_reply(messages)
        return content

    def _completion_payload(self, body: Body, messages: list[Body], content: str | None, completion_id: str) -> Body:
        """A chat.completion object: shared by live requests and batch lines."""
        prompt_tokens = _estimate_tokens(sum(len(c) for m in messages if isinstance(c := m.get("content"), str)))
        completion_tokens = _estimate_tokens(len(content or ""))
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        }

    async def _start_site(self) -> str:
        app = web.Application(client_max_size=_CLIENT_MAX_SIZE)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/chat/completions", self._handle)
        self.batch_api.add_routes(app)
        # Access logging costs more than the handler itself at thousands of requests per second.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=_SHUTDOWN_TIMEOUT)
        await runner.setup()
        self._runner = runner
        await web.TCPSite(runner, self.host, self.port, backlog=4096).start()
        bound_port = runner.addresses[0][1]
        self.base_url = f"http://{self.host}:{bound_port}/v1"
        return self.base_url

    async def _stop_site(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start(self) -> str:
        """Serve on a background thread with its own event loop; return the base URL (ending in /v1)."""
        if self._thread is not None:
            raise RuntimeError("server already started")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fakeapi", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            return asyncio.run_coroutine_threadsafe(self._start_site(), loop).result()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Shut the server down and join its thread; a no-op if it is not running."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop_site(), loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            self._loop = self._thread = None
            self.base_url = None

    def __enter__(self) -> FakeOpenAI:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


async def _serve_forever(server: FakeOpenAI) -> None:
    print(await server._start_site(), flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server._stop_site()


def main(argv: Sequence[str] | None = None) -> None:
    """Serve a FakeOpenAI in the foreground until interrupted, printing its base URL on stdout."""
    parser = argparse.ArgumentParser(prog="python -m healthbench.fakeapi", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--faults", default="", help=f"comma-separated subset of {','.join(FAULT_KINDS)}")
    parser.add_argument("--rate-limit", type=float, default=None, help="requests per second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-delay", type=float, default=0.0, help="seconds until a batch completes")
    parser.add_argument("--batch-fail-rate", type=float, default=0.0, help="share of batch lines that fail")
    parser.add_argument("--batch-malformed-rate", type=float, default=0.0, help="share of unusable batch verdicts")
    parser.add_argument("--batch-token-limit", type=int, help="enqueued tokens a batch may not take the queue past")
    args = parser.parse_args(argv)
    try:
        server = FakeOpenAI(
            fault_rate=args.fault_rate,
            faults=[f for f in args.faults.split(",") if f],
            seed=args.seed,
            rate_limit=args.rate_limit,
            latency=args.latency,
            host=args.host,
            port=args.port,
            record=False,
            batch_delay=args.batch_delay,
            batch_fail_rate=args.batch_fail_rate,
            batch_malformed_rate=args.batch_malformed_rate,
            batch_token_limit=args.batch_token_limit,
        )
    except ValueError as exc:
        parser.error(str(exc))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(server))


if __name__ == "__main__":
    main()
