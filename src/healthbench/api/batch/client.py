"""Sending chat completions through OpenAI's Batch API, at half the price of live requests.

`BatchClient` is a `Completer`: graders and policies call `complete` as they call a live `ApiClient`, and get
the same answers, later. Requests wait in a queue until none has come for `settle` seconds (or the queue fills
a batch); they are then written as Batch API input, each body byte for byte what a live call sends, uploaded,
submitted, polled and collected. A request's custom_id is the digest of its bytes (and of its `ident`, for
requests that must each be answered apart), so equal requests are sent once.

A request that fails in a batch (an error line, no line at all, an unusable answer, a failed or expired batch)
goes into a follow-up batch, counted against the same attempt bound as live retries; past it, `RequestFailed`.
An endpoint that cannot take batches (it cannot be reached, refuses the key, has no Batch API, or none of its
first answers can be read) fails every request waiting with one `EndpointUnusable`, as a live one does.
The ledger (the run's store) records each uploaded file, and each batch id as soon as it exists, so a process
killed while waiting, run again, re-attaches to its batches instead of paying for them twice. With
`wait=False` the requests still out are handed back as `Deferred` once everything needed is submitted. A
batch refused by the organization's enqueued-token limit is sent again in smaller batches, one at a time,
without spending attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import aiohttp

from healthbench.api.batch.files import (
    Outcome,
    batch_errors,
    find_batch,
    input_line,
    json_object,
    line_tokens,
    read_outcomes,
    refused_batch,
    split_lines,
    status_line,
    with_id,
)
from healthbench.api.batch.records import TERMINAL, BatchLedger, BatchSettings, OpenBatch, QueuedRequest
from healthbench.api.client import ApiClient
from healthbench.api.completer import Completer, Request
from healthbench.api.failures import cut_short
from healthbench.api.retrying import CUT_SHORT_ATTEMPTS
from healthbench.api.wire import Reading, Usage, request_key
from healthbench.errors import Deferred, EndpointUnusable, InvalidResponse, QuotaExhausted, RequestFailed

T = TypeVar("T")

# Checks on the batches that may fail in a row (each after the client's own retries) before the requests
# waiting on them fail: a wait of hours should outlast a short outage.
_CHECK_FAILURES = 10
# The error code of a batch the organization's enqueued-token limit refused, and how many refusals in a
# row (each halving what is queued at once) before the requests in them fail.
_REFUSED = "token_limit_exceeded"
_REFUSALS = 20
_SHOW_COUNTS_EVERY = 300.0


class BatchClient(Completer):
    """A `Completer` that sends requests through the Batch API of `chat`'s endpoint, with `chat`'s retry table
    for its own calls and `chat.retry.max_attempts` as the bound on attempts per request."""

    def __init__(
        self,
        chat: ApiClient,
        ledger: BatchLedger,
        purpose: str,
        settings: BatchSettings | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.chat = chat
        self.hosts = chat.server.hosts  # the Batch API's files and batches live at one endpoint: not a pool
        self.ledger = ledger
        self.purpose = purpose
        self.settings = settings or BatchSettings()
        self.notify = notify or (lambda _message: None)
        self.batches_submitted = 0
        self.requests_submitted = 0
        self._requests: dict[str, QueuedRequest] = {}
        self._queue: dict[str, QueuedRequest] = {}
        self._queued_bytes = 0
        self._last_queued = 0.0
        self._open = {
            record.input_file_id: OpenBatch(record.input_file_id, record.batch_id, record.created)
            for record in ledger.open_batches()
            if record.purpose == purpose
        }
        self.reattached = len(self._open)
        self._token_cap = self.settings.max_tokens
        self._refusals = 0
        self._unclaimed: dict[str, tuple[str, Outcome]] = {}
        self._pump_task: asyncio.Task[None] | None = None

    async def _complete(self, request: Request, parse: Callable[[str], T]) -> tuple[T, Usage]:
        """Queue one request for a batch and wait for its parsed answer (`parsed` is not needed: a batch has no
        per-minute pace)."""
        payload, ident = request.payload, request.ident
        custom_id = request_key(payload if ident is None else payload + b"\0" + ident.encode())
        queued = self._requests.get(custom_id)
        if queued is None:
            sent = self.hosts.apply(payload)  # without what the endpoint refuses, as live requests go
            line = input_line(self.chat.wire, custom_id, sent)
            queued = QueuedRequest(custom_id, line, parse, payload=payload, sent=sent)
            self._requests[custom_id] = queued
            self._place(queued)
        waiter: asyncio.Future[tuple[Any, Usage]] = asyncio.get_running_loop().create_future()
        queued.waiters.append(waiter)
        if custom_id in self._unclaimed:
            input_file_id, outcome = self._unclaimed.pop(custom_id)
            self._claimed(input_file_id)
            self._apply(queued, outcome)
        if self._pump_task is None or self._pump_task.done():
            self._pump_task = asyncio.ensure_future(self._pump())
            self._pump_task.add_done_callback(self._pump_ended)
        try:
            value, usage = await waiter
        finally:
            if waiter.cancelled():
                self._abandon(queued, waiter)
        return value, usage

    def _place(self, request: QueuedRequest) -> None:
        record = self.ledger.batch_request(request.custom_id)
        batch = self._open.get(record[0]) if record is not None else None
        if record is not None and batch is not None and batch.status not in TERMINAL:
            # Submitted already (by an earlier process, say) and still out: wait for it rather than pay again.
            request.attempts = record[1]
            batch.members.add(request.custom_id)
            batch.tokens += line_tokens(request.line)
        elif request.custom_id not in self._unclaimed:
            self._enqueue(request)

    def _enqueue(self, request: QueuedRequest, *, fresh: bool = True) -> None:
        self._queue[request.custom_id] = request
        self._queued_bytes += len(request.line)
        if fresh:  # follow-ups arrive all at once from a collected batch: no reason to wait for more
            self._last_queued = time.monotonic()

    def _abandon(self, request: QueuedRequest, waiter: asyncio.Future[tuple[Any, Usage]]) -> None:
        """A caller gave up (its task failed elsewhere): a request nobody waits for is not sent."""
        with contextlib.suppress(ValueError):
            request.waiters.remove(waiter)
        if not request.waiters and request.custom_id in self._queue:
            del self._queue[request.custom_id]
            self._queued_bytes -= len(request.line)
            del self._requests[request.custom_id]

    def _claimed(self, input_file_id: str) -> None:
        batch = self._open.get(input_file_id)
        if batch is not None:
            batch.unclaimed -= 1
            if batch.unclaimed == 0 and batch.status in TERMINAL:
                self._close(batch)

    def _close(self, batch: OpenBatch) -> None:
        self._open.pop(batch.input_file_id, None)
        self.ledger.close_batch(batch.input_file_id)

    def _apply(self, request: QueuedRequest, outcome: Outcome) -> None:
        """Settle a request with a batch result: answer its callers, queue a follow-up, or fail it."""
        request.usage.add(outcome.usage)
        if outcome.status is not None and self.hosts.learn(outcome.status, outcome.body, request.sent):
            # A parameter the project added, refused: the line goes again without it, and no attempt is spent.
            request.sent = self.hosts.apply(request.payload)
            request.line = input_line(self.chat.wire, request.custom_id, request.sent)
            request.attempts -= 1
            self._enqueue(request, fresh=False)
            return
        cause, retryable = outcome.cause, outcome.retryable
        bound = self.chat.retry.max_attempts
        if outcome.content is not None:
            try:
                value = request.parse(outcome.content)
            except InvalidResponse as exc:
                cause, retryable = str(exc), True
                if outcome.cut:  # as a live call's (`retrying.Kind.CUT_SHORT`): a larger cap cures it, not attempts
                    cause, bound = cut_short(Reading(outcome.content, outcome.usage, True), exc), CUT_SHORT_ATTEMPTS
            else:
                self._finish(request, (value, request.usage))
                return
        # Nobody waits any more (the sample failed on another item): a follow-up would be paid for nothing.
        if retryable and request.attempts < min(bound, self.chat.retry.max_attempts) and request.waiters:
            self._enqueue(request, fresh=False)
            return
        self._finish(request, RequestFailed(cause, request.attempts, cut_short=outcome.cut and retryable))

    def _finish(self, request: QueuedRequest, result: tuple[Any, Usage] | Exception) -> None:
        self._requests.pop(request.custom_id, None)
        for waiter in request.waiters:
            if waiter.done():
                continue
            if isinstance(result, Exception):
                waiter.set_exception(result)
            else:
                waiter.set_result(result)
                # One request was paid for: callers after the first get it free, as from a cache.
                result = (result[0], Usage(batch=True))

    async def _pump(self) -> None:
        """Submit, poll and collect until nothing is queued or out; any failure fails the waiting requests."""
        next_poll = 0.0
        polled = False  # since the last submission
        failed_checks = 0
        try:
            while self._queue or self._watching():
                now = time.monotonic()
                if (
                    self._queue
                    and self._room()
                    and (
                        now - self._last_queued >= self.settings.settle
                        or len(self._queue) >= self.settings.max_requests
                        or self._queued_bytes >= self.settings.max_bytes
                    )
                ):
                    await self._submit_queue()
                    # Poll at once: the user sees the new batch's status, and `--no-wait` can leave.
                    polled, next_poll = False, 0.0
                    continue
                if self._watching() and now >= next_poll:
                    try:
                        await self._poll()
                        failed_checks = 0
                    except RequestFailed as exc:
                        failed_checks += 1
                        if failed_checks >= _CHECK_FAILURES:
                            raise
                        self.notify(f"could not check on the {self.purpose} batches, trying again: {exc}")
                    polled = True
                    next_poll = time.monotonic() + self.settings.poll_interval
                    continue
                if polled and not self.settings.wait and not (self._queue and self._room()):
                    self._leave()
                    return
                waits = [next_poll - now] if self._watching() else []
                if self._queue and self._room():
                    waits.append(self._last_queued + self.settings.settle - now)
                await asyncio.sleep(max(0.01, min(waits)))
        except (RequestFailed, EndpointUnusable, QuotaExhausted) as exc:
            self._fail_all(exc)

    def _fail_all(self, failure: Exception) -> None:
        """Every request still waiting ends with `failure` (or is deferred); nothing queued is sent."""
        for request in list(self._requests.values()):
            self._finish(request, failure)
        self._queue.clear()
        self._queued_bytes = 0

    def _pump_ended(self, task: asyncio.Task[None]) -> None:
        """A pump that stopped on anything else (a bug, a store that cannot be written) hands its error to the
        requests waiting, rather than leaving them to wait for ever."""
        if not task.cancelled() and isinstance(error := task.exception(), Exception):
            self._fail_all(error)

    def _leave(self) -> None:
        """Give every request still out back to its caller as deferred; the ledger keeps its batch."""
        self._fail_all(Deferred(self.purpose))

    def _queued_tokens(self) -> int:
        """Estimated tokens of this client's batches still in the provider's queue."""
        return sum(batch.tokens for batch in self._open.values() if batch.status not in TERMINAL)

    def _room(self) -> bool:
        """Whether a batch may go out now: under a token cap, batches (each cut to the cap) go one at a time,
        so that whenever there is room, the first batch fits and the queue moves."""
        return self._token_cap is None or self._queued_tokens() == 0

    def _watching(self) -> bool:
        return any(batch.status not in TERMINAL for batch in self._open.values())

    async def _submit_queue(self) -> None:
        queued = list(self._queue.values())
        rest = iter(queued)
        for size in split_lines([r.line for r in queued], self.settings, self._token_cap):
            chunk = list(itertools.islice(rest, size))
            if not self._room():
                break  # the rest waits until this client's batch is done
            for request in chunk:
                del self._queue[request.custom_id]
                self._queued_bytes -= len(request.line)
            try:
                await self._submit(chunk)
            except RequestFailed as exc:
                if exc.status is not None:  # refused outright (too large, say): so would every batch be
                    raise self.chat.unusable(f"refused a batch ({refused_batch(exc)})", refused=True) from None
                error = RequestFailed(f"could not submit a batch to {self.chat.base_url}: {exc.cause}", exc.attempts)
                for request in chunk:
                    self._finish(request, error)

    async def _submit(self, chunk: list[QueuedRequest]) -> None:
        data = b"".join(request.line for request in chunk)

        def upload() -> aiohttp.FormData:
            form = aiohttp.FormData()
            form.add_field("purpose", "batch")
            form.add_field("file", data, filename=f"healthbench-{self.purpose}.jsonl", content_type="application/jsonl")
            return form

        uploaded = await self.chat.api("POST", "/files", form=upload, read=with_id)
        for request in chunk:
            request.attempts += 1
        self.ledger.record_upload(uploaded["id"], self.purpose, [(r.custom_id, r.attempts) for r in chunk])
        members = {r.custom_id for r in chunk}
        batch = OpenBatch(uploaded["id"], None, time.time(), members, sum(line_tokens(r.line) for r in chunk))
        self._open[batch.input_file_id] = batch
        try:
            await self._create(batch)
        except RequestFailed:
            self._close(batch)
            raise
        self.batches_submitted += 1
        self.requests_submitted += len(chunk)
        megabytes = len(data) / 1e6
        self.notify(f"batch {batch.batch_id}: submitted {len(chunk)} {self.purpose} requests ({megabytes:.1f} MB)")

    async def _create(self, batch: OpenBatch) -> None:
        body = {
            "input_file_id": batch.input_file_id,
            "endpoint": self.chat.wire.batch_url,
            "completion_window": self.settings.completion_window,
            "metadata": {"healthbench": self.purpose},
        }
        created = await self.chat.api("POST", "/batches", json_body=body, read=with_id)
        batch.batch_id = created["id"]
        self.ledger.record_batch_id(batch.input_file_id, created["id"])

    async def _find(self, batch: OpenBatch) -> None:
        """The id of a batch created from `batch`'s file by a process that died before recording it; or, if
        there is none, the batch created now."""
        found = await find_batch(self.chat, batch.input_file_id)
        if found is None:
            await self._create(batch)
            return
        batch.batch_id = found
        self.ledger.record_batch_id(batch.input_file_id, found)

    async def _poll(self) -> None:
        for batch in list(self._open.values()):
            if batch.status in TERMINAL:
                continue
            if batch.batch_id is None:
                await self._find(batch)
            state = await self.chat.api("GET", f"/batches/{batch.batch_id}", read=json_object)
            status = str(state.get("status"))
            # A new status at once, otherwise the counts every few minutes: a day's wait would flood the screen.
            if status != batch.shown_status or time.monotonic() - batch.shown_at >= _SHOW_COUNTS_EVERY:
                batch.shown_status, batch.shown_at = status, time.monotonic()
                self.notify(status_line(batch.batch_id, state, batch.created))
            if status in TERMINAL:
                # Marked finished only once collected: a download that fails is tried again at the next check.
                await self._collect(batch, state)
            batch.status = status

    async def _collect(self, batch: OpenBatch, state: Mapping[str, Any]) -> None:
        outcomes = await read_outcomes(self.chat, state)
        status = state.get("status")
        missing = f"no result in batch {batch.batch_id} ({status})"
        if status == "failed":
            errors = batch_errors(state)
            missing = f"batch {batch.batch_id} failed: " + "; ".join(str(e.get("message")) for e in errors[:3])
            if errors and all(e.get("code") == _REFUSED for e in errors):
                self._refused(batch, missing)
                return
        self._refusals = 0
        for custom_id in batch.members:
            request = self._requests.get(custom_id)
            if request is not None:
                self._apply(request, outcomes.pop(custom_id, Outcome(None, Usage(batch=True), missing)))
        for custom_id, outcome in outcomes.items():
            request = self._requests.get(custom_id)
            if request is not None and custom_id not in self._queue:
                self._apply(request, outcome)
            elif request is None:
                # A request of this run not asked for yet in this process (re-attached after a restart).
                self._unclaimed[custom_id] = (batch.input_file_id, outcome)
                batch.unclaimed += 1
        if batch.unclaimed == 0:
            self._close(batch)

    def _refused(self, batch: OpenBatch, cause: str) -> None:
        """A batch the organization's enqueued-token limit turned away: its requests go again, without
        spending an attempt, in smaller batches that wait for this client's others to finish."""
        self._close(batch)
        self._refusals += 1
        requests = [self._requests[c] for c in batch.members if c in self._requests]
        if self._refusals > _REFUSALS:
            for request in requests:
                self._finish(request, RequestFailed(f"{cause} ({_REFUSALS} times in a row)", request.attempts))
            return
        self._token_cap = max(1, (batch.tokens + self._queued_tokens()) // 2)
        for request in requests:
            request.attempts -= 1
            self._enqueue(request, fresh=False)
        self.notify(f"{cause}; from now on at most about {self._token_cap:,} tokens are queued at once")

    def release(self) -> None:
        """At the end of a finished run: results nobody asked for are not needed, so their batches close."""
        for input_file_id, _ in self._unclaimed.values():
            batch = self._open.get(input_file_id)
            if batch is not None and batch.status in TERMINAL:
                self._close(batch)
        self._unclaimed.clear()

    async def aclose(self) -> None:
        """Stop watching batches (they stay recorded for the next run) and close the connection."""
        if self._pump_task is not None and not self._pump_task.done():
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump_task
        await self.chat.aclose()
