"""A fake OpenAI-compatible server for tests and benchmarks: routing, faults and recording.

It is a real HTTP server on loopback (no mocks), so clients exercise their actual networking,
retry and parsing code. Replies are deterministic (see ``replies``): grader prompts get a verdict
that is a pure function of the prompt text, an attacker's request its rewrite (``attacker``), everything else gets
a reply derived from the messages
(offered a tool named ``answer``, it calls it: see ``agent``). Faults and rate limiting can be injected
deterministically from a seed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from types import TracebackType

from aiohttp import web

from healthbench.errors import NotServing, SettingsError
from healthbench.testing.agent import answer_call, chat_stream, wants_stream, with_tool_call
from healthbench.testing.attacker import attack_reply
from healthbench.testing.batch import FakeBatchAPI
from healthbench.testing.caching import PromptCache
from healthbench.testing.canned import Canned, CannedAnswers
from healthbench.testing.capacity import Capacity
from healthbench.testing.endpoints import CHAT, ENDPOINTS, Endpoint, Prompt, endpoint_for
from healthbench.testing.gather import Gathering
from healthbench.testing.graders import GRADERS, fake_verdict, list_item_verdict
from healthbench.testing.hosts import Host
from healthbench.testing.judge import add_judge_routes
from healthbench.testing.limits import Limiter, RateLimits
from healthbench.testing.prefixes import PrefixCache
from healthbench.testing.replies import (
    LIST_FAULTS,
    PROSE,
    STRING_VERDICT,
    Body,
    error,
    faulty_list,
    json_error,
    per_reply_items,
    policy_reply,
    verdict_reply,
    verdicts_reply,
)

__all__ = ["FAULT_KINDS", "FakeOpenAI"]

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

# Generous so long grader prompts never hit aiohttp's 1 MiB default and turn into 413s.
_CLIENT_MAX_SIZE = 64 * 1024 * 1024
# Bounds how long stop() waits for handlers still sleeping out their latency.
_SHUTDOWN_TIMEOUT = 2.0


class FakeOpenAI:
    """A fake OpenAI server, Chat Completions and the Responses API; see the module docstring.

    ``responses_by_kind`` counts answers by kind: ``"ok"``, each fault name in ``FAULT_KINDS``, ``"fail_always"``,
    ``"refused"`` (a 400 carrying what ``refuse`` returned), ``"rate_limited"``, ``"quota_exhausted"`` and
    ``"bad_request"`` (``limits`` models OpenAI's limiter: see ``healthbench.testing.limits``; it tells time by
    ``clock``, which a test may stop, so that what it refuses depends on the requests alone). Counters are only
    mutated on the server's event loop; read them (or call ``reset()``) while no requests are in flight. The
    ``respond`` and ``fail_always`` hooks run on that loop too, so they must be quick and not block.
    ``bodies`` records each model request's body and ``paths`` (aligned with it) the path it came to.

    ``grader`` picks how grader requests are judged (see ``healthbench.testing.graders``: ``hashed``,
    ``fooled``, ``reply_blind``, ``coin``, the last seeded by ``seed``).

    With ``strict_params`` (the default) it refuses what OpenAI refuses, as OpenAI does, with a 400
    before any rate limiting or fault: see ``healthbench.testing.params``.

    A per-reply grader prompt (a rubric's items numbered in one prompt) is answered with a JSON list of verdicts,
    each item's a pure function of the conversation and the item (``replies.item_verdict``). ``list_fault``
    makes such answers malformed on demand: called with the body and how many times the same body was answered
    before, it names one of ``LIST_FAULTS`` (or None for a good list). With ``prompt_cache`` (the default),
    requests that carry a ``prompt_cache_key`` report cached prompt tokens as OpenAI would (see ``caching``).

    It also fakes the Batch API (files and batches, see ``healthbench.testing.batch``), configured by the
    ``batch_*`` and ``max_*`` arguments and counted in ``batches_created``, ``batch_lines_submitted``,
    ``batch_bodies`` and ``files_uploaded``. Batches never touch the live counters above.

    ``judge_host`` plays a judge host other than OpenAI (``healthbench.testing.hosts``): thinking before the verdict,
    parameters refused as Azure OpenAI refuses them (counted as ``"refused_parameter"``), no usage.

    With ``canned``, every request on every path gets that one answer instead, counted in ``requests_total`` and
    ``responses_by_kind["canned"]``. ``gathering`` can hold requests until so many are in flight at once
    (``healthbench.testing.gather``).

    It plays a self-hosted vLLM judge too (``healthbench.testing.capacity``, ``prefixes``, ``judge``): with
    ``max_running``, at most that many requests are in service at once (each taking ``latency``), the rest wait in
    arrival order, as vLLM's ``max_num_seqs`` holds them; ``capacity`` counts ``running``, ``waiting`` and their peaks
    (``peak_running``, ``peak_waiting``), and ``pause()`` holds the requests in service unanswered until
    ``resume()`` (``answer_held()`` answers those held now and holds the next). ``prefix_cache`` counts, per
    server, the requests that came into service (``queries``, ``query_tokens``) and those whose shared prefix (a
    grader prompt's text before its rubric item) this server had served before (``hits``, ``hit_tokens``).
    ``GET /health``, ``GET /v1/models`` (``models``: by default ``served_model_name`` alone, as a vLLM or SGLang
    server lists the model it serves; counted in ``models_listed``) and ``GET /metrics`` (vLLM's gauge and counter
    names, and the fake's own under ``healthbench_fake_``) answer as vLLM's do. Requests refused before any work (a
    400, a 429) take no slot and query no prefix.
    """

    def __init__(
        self,
        *,
        respond: Callable[[Body], str | None] | None = None,
        fault_rate: float = 0.0,
        faults: Sequence[str] = (),
        seed: int = 0,
        fail_always: Callable[[Body], bool] | None = None,
        refuse: Callable[[Body], Body | None] | None = None,
        rate_limit: float | None = None,
        limits: RateLimits | None = None,
        latency: float = 0.0,
        latency_jitter: float = 0.0,
        fault_retry_after: float = 0.0,
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
        strict_params: bool = True,
        grader: str = "hashed",
        list_fault: Callable[[Body, int], str | None] | None = None,
        prompt_cache: bool = True,
        canned: Canned | None = None,
        clock: Callable[[], float] = time.monotonic,
        judge_host: Host | None = None,
        max_running: int | None = None,
        served_model_name: str = "fake-judge",
        models: Sequence[str] | None = None,
    ) -> None:
        unknown = sorted(set(faults) - set(FAULT_KINDS))
        if unknown:
            raise SettingsError(f"unknown faults {unknown}; choose from {FAULT_KINDS}")
        if not 0.0 <= fault_rate <= 1.0:
            raise SettingsError("fault_rate must be between 0 and 1")
        if fault_rate > 0 and not faults:
            raise SettingsError("fault_rate > 0 needs at least one fault kind")
        if grader not in GRADERS:
            raise SettingsError(f"unknown grader {grader!r}; choose from {GRADERS}")
        if rate_limit is not None and rate_limit <= 0:
            raise SettingsError("rate_limit must be positive")
        if latency < 0 or not 0 <= latency_jitter <= latency:
            raise SettingsError("latency must be non-negative, and latency_jitter between 0 and latency")
        if batch_delay < 0 or fault_retry_after < 0:
            raise SettingsError("batch_delay and fault_retry_after must be non-negative")
        if not (0.0 <= batch_fail_rate <= 1.0 and 0.0 <= batch_malformed_rate <= 1.0):
            raise SettingsError("batch_fail_rate and batch_malformed_rate must be between 0 and 1")
        if max_file_bytes <= 0 or max_batch_requests <= 0:
            raise SettingsError("max_file_bytes and max_batch_requests must be positive")
        if not served_model_name:
            raise SettingsError("served_model_name must not be empty")
        self.respond = respond
        self.fault_rate = fault_rate
        self.faults = tuple(faults)
        self.seed = seed
        self.fail_always = fail_always
        self.refuse = refuse
        self.rate_limit = rate_limit
        self.limits = limits
        self.clock = clock
        self.latency = latency
        # Each answer takes latency +/- latency_jitter, drawn from an RNG of its own so faults stay as seeded.
        self.latency_jitter = latency_jitter
        # An injected 429 is a gateway's "slow down": a Retry-After and nothing else (no limit, no headers).
        self.fault_retry_after = fault_retry_after
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
        self.strict_params = strict_params
        self.grader = grader
        self.list_fault = list_fault
        self.prompt_cache = PromptCache() if prompt_cache else None
        self.canned = canned
        self.judge_host = judge_host
        self.models = (served_model_name,) if models is None else tuple(models)
        self.gathering = Gathering()
        self.capacity = Capacity(max_running)
        self.served_model_name = served_model_name
        self.prefix_cache = PrefixCache()
        # Files and batches live as long as the server, across reset(), like the real service's.
        self.batch_api: FakeBatchAPI = FakeBatchAPI(self)
        self.base_url: str | None = None
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._canned = CannedAnswers(self)
        self.reset()

    def reset(self) -> None:
        """Clear counters and records, and restart the fault RNGs and rate limiter from scratch.

        Uploaded files and created batches are kept.
        """
        self.requests_total = 0
        self.responses_by_kind: Counter[str] = Counter()
        self.max_in_flight = 0
        self.bodies: list[Body] = []
        self.paths: list[str] = []
        self.auth_headers: list[str | None] = []
        self._in_flight = 0
        self._rng = random.Random(self.seed)
        self._latency_rng = random.Random(self.seed)
        self._limiter = Limiter(self.limits or self.rate_limit, self.clock())
        self.batches_created = 0
        self.batch_lines_submitted = 0
        self.batch_bodies: list[str] = []
        self.files_uploaded = 0
        self.models_listed = 0
        self.batch_api.reset()
        # How often each per-reply body was answered (for ``list_fault``), and the prompts cached so far.
        self._lists_answered: Counter[str] = Counter()
        if self.prompt_cache is not None:
            self.prompt_cache.reset()
        self.prefix_cache.reset()
        self.capacity.reset()

    @property
    def limiter(self) -> Limiter:
        """The rate limiter, with its counts of what it admitted (``answered``, ``answered_tokens``)."""
        return self._limiter

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests_total += 1
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            await self.gathering.hold(self._in_flight)
            return await self._answer(request)
        finally:
            self._in_flight -= 1
            self.gathering.settled(self._in_flight)

    async def _answer(self, request: web.Request) -> web.Response:
        self.auth_headers.append(request.headers.get("Authorization"))
        try:
            body = json.loads(await request.read())
        except ValueError:
            self.responses_by_kind["bad_request"] += 1
            return error(400, "request body is not valid JSON", "invalid_request_error")
        if isinstance(body, dict) and self.record:
            self.bodies.append(body)
            self.paths.append(request.path)
        endpoint = endpoint_for(request.path)
        prompt = endpoint.read(body, self.strict_params)
        if not isinstance(prompt, Prompt):
            self.responses_by_kind["bad_request"] += 1
            return json_error(400, prompt)

        if self.judge_host is not None and (refused := self.judge_host.refusal(body)) is not None:
            self.responses_by_kind["refused_parameter"] += 1
            return json_error(400, refused)
        # A scripted 400 (a prompt the provider's filter flags, say): its error object, from the body.
        if self.refuse is not None and (refused := self.refuse(body)) is not None:
            self.responses_by_kind["refused"] += 1
            return json_error(400, refused)

        refusal, rate_headers = self._limiter.admit(body, self.clock())
        if refusal is not None:
            self.responses_by_kind["quota_exhausted" if self._limiter.quota_spent else "rate_limited"] += 1
            if self._limiter.limits is not None and self._limiter.limits.refusal_latency:
                await asyncio.sleep(self._limiter.limits.refusal_latency)
            return refusal

        if self.fail_always is not None and self.fail_always(body):
            kind = "fail_always"
        elif self.fault_rate > 0 and self._rng.random() < self.fault_rate:
            kind = self._rng.choice(self.faults)
        else:
            kind = "ok"
        self.responses_by_kind[kind] += 1
        async with self.capacity.slot():
            self.prefix_cache.query(prompt)
            if self.latency > 0:
                await asyncio.sleep(self.latency + self._latency_rng.uniform(-self.latency_jitter, self.latency_jitter))
            response = self._respond(kind, request, endpoint, body, prompt)
        response.headers.update(rate_headers)
        return response

    def _respond(self, kind: str, request: web.Request, endpoint: Endpoint, body: Body, prompt: Prompt) -> web.Response:
        content: str | None
        if kind == "ok" and (call := answer_call(body, prompt.items)) is not None:
            serial = f"fake-{self.requests_total}"
            payload = with_tool_call(endpoint.payload(body, prompt, None, serial), call, serial)
            return self._reply(endpoint, body, payload)
        if kind == "ok":
            content = self.ok_content(body, prompt)
        elif kind in ("prose", "fail_always"):
            content = PROSE
        elif kind == "null":
            content = None
        elif kind == "empty":
            content = ""
        elif kind == "string_verdict":
            content = STRING_VERDICT
        elif kind == "429":
            retry_after = {"Retry-After": f"{self.fault_retry_after:g}"}
            return error(429, "Rate limit reached (injected)", "requests", retry_after)
        elif kind in ("500", "503"):
            return error(int(kind), f"Injected {kind} error", "server_error")
        elif kind == "badjson":
            return web.Response(text=endpoint.bad_json, content_type="application/json")
        else:  # "drop"
            if request.transport is not None:
                request.transport.close()
            # Never reaches the client: aiohttp discards writes to a closed transport.
            return web.Response()
        serial, cached = f"fake-{self.requests_total}", self.cached_tokens(body, prompt)
        payload = endpoint.payload(body, prompt, content, serial, cached)
        if self.judge_host is not None and endpoint is CHAT:  # a judge host as it answers (``hosts``)
            payload = self.judge_host.answer(payload, body, prompt.grader_prompt is not None)
        return self._reply(endpoint, body, payload)

    @staticmethod
    def _reply(endpoint: Endpoint, body: Body, payload: Body) -> web.Response:
        """The answer carrying `payload`: streamed when a Chat Completions request asks (see ``agent``)."""
        if endpoint is CHAT and wants_stream(body):
            return web.Response(text=chat_stream(payload, body), content_type="text/event-stream")
        return web.Response(text=json.dumps(payload), content_type="application/json")

    def ok_content(self, body: Body, prompt: Prompt) -> str | None:
        """The reply when nothing is injected: shared by live requests and batch lines."""
        content = self.respond(body) if self.respond is not None else None
        if content is None:
            if (grader_prompt := prompt.grader_prompt) is not None:
                content = self._grader_reply(body, grader_prompt)
            else:
                content = attack_reply(prompt.items) or policy_reply(prompt.items)
        return content

    def _grader_reply(self, body: Body, text: str) -> str:
        """A verdict for a per-item grader prompt; for a per-reply one, a list of them (or the malformed list asked
        for)."""
        graded = per_reply_items(text)
        if graded is None:
            met, explanation = fake_verdict(self.grader, text, self.seed)
            return verdict_reply(met, None if self.grader == "hashed" else explanation)
        conversation, items = graded
        verdicts = [(number, *list_item_verdict(self.grader, conversation, item, self.seed)) for number, item in items]
        if self.list_fault is not None:
            # The same request asked again, with or without its cache key (a new host's first ones go without).
            asked = {key: value for key, value in body.items() if key != "prompt_cache_key"}
            digest = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()
            fault = self.list_fault(body, self._lists_answered[digest])
            self._lists_answered[digest] += 1
            if fault is not None:
                if fault not in LIST_FAULTS:
                    raise SettingsError(f"unknown list fault {fault!r}; choose from {LIST_FAULTS}")
                return faulty_list(fault, verdicts)
        return verdicts_reply(verdicts)

    def cached_tokens(self, body: Body, prompt: Prompt) -> int:
        """The prompt tokens of this request read from the fake's prompt cache (none without one)."""
        return 0 if self.prompt_cache is None else self.prompt_cache.cached_tokens(body, prompt.input_text)

    async def _start_site(self) -> str:
        app = web.Application(client_max_size=_CLIENT_MAX_SIZE, middlewares=[self._canned.middleware])
        for path in ENDPOINTS:
            app.router.add_post(path, self._handle)
            app.router.add_post(path.removeprefix("/v1"), self._handle)
        self.batch_api.add_routes(app)
        add_judge_routes(app, self)
        # Access logging costs more than the handler itself at thousands of requests per second.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=_SHUTDOWN_TIMEOUT)
        await runner.setup()
        self._runner = runner
        await web.TCPSite(runner, self.host, self.port, backlog=4096).start()
        bound_port = runner.addresses[0][1]
        self.base_url = f"http://{self.host}:{bound_port}/v1"
        return self.base_url

    async def _stop_site(self) -> None:
        self._canned.release()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start(self) -> str:
        """Serve on a background thread with its own event loop; return the base URL (ending in /v1)."""
        if self._thread is not None:
            raise NotServing("server already started")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fake-openai", daemon=True)
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
            self._loop = None
            self._thread = None
            self.base_url = None

    def pause(self) -> None:
        """Hold every request in service, and those coming into it, unanswered until ``resume()`` (see
        ``capacity``): callable from any thread."""
        self._on_loop(self.capacity.pause)

    def resume(self) -> None:
        """Answer the requests held by ``pause()``: callable from any thread."""
        self._on_loop(self.capacity.resume)

    def answer_held(self) -> None:
        """Answer the requests ``pause()`` holds now and keep holding those that come after them (some of a step's
        requests answered, the rest not yet): callable from any thread."""
        self._on_loop(self.capacity.answer_held)

    def _on_loop(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the server's loop (at once if it serves on none of its own, or from its thread), and
        return once it has run."""
        loop = self._loop
        if loop is None or threading.current_thread() is self._thread:
            action()
            return

        async def run() -> None:
            action()

        asyncio.run_coroutine_threadsafe(run(), loop).result()

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
