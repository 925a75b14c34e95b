"""A fake OpenAI Batch API (files and batches) served by ``FakeOpenAI`` beside its model endpoints.

A batch goes to one endpoint, ``/v1/chat/completions`` or ``/v1/responses``, and every line's url
must name it. Its lines are answered when it is created, exactly as live requests to that endpoint
on the "ok" path would be (parameter rules included), then revealed as its status advances with
time: ``validating`` for the first 10% of ``batch_delay``, ``in_progress`` until 90%,
``finalizing`` until 100%, then ``completed``.
Output lines come in a shuffled order and failed or malformed lines are injected at given rates,
all decided by an RNG seeded from the server's seed and separate from the live fault RNG.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Protocol

from aiohttp import BodyPartReader, web

from healthbench.testing.batchlines import line_error, validate_lines
from healthbench.testing.endpoints import ENDPOINTS, Endpoint, Prompt
from healthbench.testing.hosts import Host
from healthbench.testing.replies import PROSE, STRING_VERDICT, Body, error, error_body

__all__ = ["BATCH_ENDPOINTS", "FakeBatchAPI"]

BATCH_ENDPOINTS: tuple[str, ...] = tuple(ENDPOINTS)
_VALIDATING, _IN_PROGRESS = 0.1, 0.9  # shares of batch_delay at which each phase ends
_FINISHED = frozenset({"completed", "failed", "expired", "cancelled"})
_MALFORMED = (PROSE, STRING_VERDICT)
_BAD_REQUEST = "invalid_request_error"


@dataclass
class _File:
    info: Body  # the file object the API returns
    data: bytes


@dataclass
class _Batch:
    request: Body  # the creation fields echoed back: endpoint, input_file_id, completion_window, metadata
    id: str
    created_wall: float
    created_clock: float
    total: int
    errors: list[Body]  # validation errors; any makes the batch fail
    # (succeeded, output line) in processing order, which is the order the output files list them.
    results: list[tuple[bool, bytes]] = field(default_factory=list)
    cancelled: tuple[int, dict[str, int]] | None = None  # (when, request counts then)
    output_file_id: str | None = None
    error_file_id: str | None = None
    files_made: bool = False
    tokens: int = 0  # what the batch holds in the organization's queue while it is not finished
    malformed: int = 0  # answered lines whose verdict was made unusable on purpose


class BatchHost(Protocol):
    """What the Batch API needs of the server it is served by (``FakeOpenAI``): its batch settings, its batch
    counters, and the answer a request gets when no fault is injected."""

    seed: int
    record: bool
    strict_params: bool
    judge_host: Host | None
    batch_delay: float
    batch_fail_rate: float
    batch_malformed_rate: float
    batch_fail_always: Callable[[Body], bool] | None
    max_file_bytes: int
    max_batch_requests: int
    batch_token_limit: int | None
    batches_created: int
    batch_lines_submitted: int
    batch_bodies: list[str]
    files_uploaded: int

    def ok_content(self, body: Body, prompt: Prompt) -> str | None:
        """The reply when nothing is injected."""

    def cached_tokens(self, body: Body, prompt: Prompt) -> int:
        """The prompt tokens of a request read from the prompt cache."""


class FakeBatchAPI:
    """The Batch API state and handlers of one ``FakeOpenAI``; its settings and counters live there.

    Files and batches persist for the server's lifetime. ``clock`` (monotonic seconds) times status
    progression; tests may replace it to move a batch through its phases without sleeping.
    """

    def __init__(self, server: BatchHost) -> None:
        self.server = server
        self.clock: Callable[[], float] = time.monotonic
        # The next this many status checks and file downloads answer 503, as during a provider outage.
        self.outage = 0
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        # A per-server token keeps ids unique across restarts, so a stale id from a client is a 404.
        self._token = secrets.token_hex(4)
        self._serial = count(1)
        self.reset()

    def reset(self) -> None:
        """Restart the batch RNG; existing files and batches are kept."""
        self._rng = random.Random(f"fakebatch-{self.server.seed}")

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{self._token}{next(self._serial):07d}"

    def add_routes(self, app: web.Application) -> None:
        """Register the files and batches routes, with and without the ``/v1`` prefix."""
        for root in ("/v1", ""):
            app.router.add_post(f"{root}/files", self._upload)
            app.router.add_get(f"{root}/files/{{id}}", self._file)
            app.router.add_get(f"{root}/files/{{id}}/content", self._file)
            app.router.add_post(f"{root}/batches", self._create)
            app.router.add_get(f"{root}/batches", self._list)
            app.router.add_get(f"{root}/batches/{{id}}", self._retrieve)
            app.router.add_post(f"{root}/batches/{{id}}/cancel", self._cancel)

    def _add_file(self, filename: str, purpose: str, data: bytes) -> Body:
        file_id = self._new_id("file-")
        info = {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time())}
        self.files[file_id] = _File({**info, "filename": filename, "purpose": purpose}, data)
        return self.files[file_id].info

    async def _upload(self, request: web.Request) -> web.Response:
        purpose, filename, data = None, "upload.jsonl", None
        try:
            reader = await request.multipart()
        except (AssertionError, ValueError):  # aiohttp asserts on a non-multipart content type
            return error(400, "expected a multipart/form-data body", _BAD_REQUEST)
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "purpose":
                purpose = await part.text()
            elif part.name == "file":
                filename = part.filename or filename
                chunks, size = [], 0
                # Streamed so an oversized upload is refused without holding all of it.
                while chunk := await part.read_chunk():
                    size += len(chunk)
                    if size > self.server.max_file_bytes:
                        return error(400, f"file exceeds {self.server.max_file_bytes} bytes", _BAD_REQUEST)
                    chunks.append(chunk)
                data = b"".join(chunks)
        if purpose != "batch":
            return error(400, "'purpose' must be 'batch'", _BAD_REQUEST)
        if data is None:
            return error(400, "missing 'file' field", _BAD_REQUEST)
        self.server.files_uploaded += 1
        return web.json_response(self._add_file(filename, "batch", data))

    def _down(self) -> bool:
        if self.outage <= 0:
            return False
        self.outage -= 1
        return True

    async def _file(self, request: web.Request) -> web.Response:
        if self._down():
            return error(503, "The server is temporarily unavailable", "server_error")
        file = self.files.get(request.match_info["id"])
        if file is None:
            return error(404, "No such File object", _BAD_REQUEST)
        if request.path.endswith("/content"):
            return web.Response(body=file.data, content_type="application/octet-stream")
        return web.json_response(file.info)

    async def _create(self, request: web.Request) -> web.Response:
        try:
            req = json.loads(await request.read())
        except ValueError:
            return error(400, "request body is not valid JSON", _BAD_REQUEST)
        if not isinstance(req, dict):
            return error(400, "request body must be a JSON object", _BAD_REQUEST)
        file_id = req.get("input_file_id")
        file = self.files.get(file_id) if isinstance(file_id, str) else None
        if file is None:
            return error(404, "No such File object", _BAD_REQUEST)
        endpoint = req.get("endpoint")
        if endpoint not in BATCH_ENDPOINTS:
            return error(400, f"'endpoint' must be one of {', '.join(BATCH_ENDPOINTS)}", _BAD_REQUEST)
        if req.get("completion_window") != "24h":
            return error(400, "'completion_window' must be '24h'", _BAD_REQUEST)
        metadata = req.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            return error(400, "'metadata' must be an object", _BAD_REQUEST)
        lines = [(n, raw) for n, raw in enumerate(file.data.split(b"\n"), 1) if raw.strip()]
        echoed = dict(endpoint=endpoint, input_file_id=file_id, completion_window="24h", metadata=metadata)
        batch = _Batch(echoed, self._new_id("batch_"), time.time(), self.clock(), len(lines), [])
        self.server.batches_created += 1
        self.server.batch_lines_submitted += len(lines)
        if not lines:
            batch.errors.append(line_error("empty_file", "the input file has no requests", None))
        elif len(lines) > self.server.max_batch_requests:
            message = f"{len(lines)} requests exceed the limit of {self.server.max_batch_requests}"
            batch.errors.append(line_error("too_many_tasks", message, None))
        else:
            requests = validate_lines(
                lines, batch.errors, endpoint, self.server.batch_bodies if self.server.record else None
            )
            batch.tokens = sum(len(json.dumps(body)) // 4 for _, body in requests)
            if not batch.errors and not self._queue_has_room(batch):
                batch.errors.append(line_error("token_limit_exceeded", self._limit_message(), None))
            if not batch.errors:
                self._answer(batch, requests)
        self.batches[batch.id] = batch
        return web.json_response(self._view(batch))

    def _queue_has_room(self, batch: _Batch) -> bool:
        """Whether the batch fits under ``batch_token_limit`` beside the batches still queued."""
        limit = self.server.batch_token_limit
        if limit is None:
            return True
        queued = sum(b.tokens for b in self.batches.values() if not b.errors and self._status(b) not in _FINISHED)
        return queued + batch.tokens <= limit

    def _limit_message(self) -> str:
        return (
            f"Enqueued token limit reached for the grader model in organization org-fake. Limit: "
            f"{self.server.batch_token_limit:,} enqueued tokens. Please try again once some in_progress batches "
            "have been completed."
        )

    def _answer(self, batch: _Batch, requests: list[tuple[str, Body]]) -> None:
        """Answer every line now, in a shuffled order, with injected failures and malformed verdicts."""
        rng = random.Random(self._rng.getrandbits(64))  # one draw per batch: later batches stay reproducible
        order = list(range(len(requests)))
        rng.shuffle(order)
        malformed = 0
        endpoint = ENDPOINTS[batch.request["endpoint"]]
        for index in order:
            custom_id, body = requests[index]
            # Both draws always happen so one rate does not shift which lines the other picks.
            fail_draw, malformed_draw = rng.random(), rng.random()
            req_id = self._new_id("req_")
            status, reply, bad = self._reply(endpoint, body, fail_draw, malformed_draw, malformed, req_id)
            malformed += bad
            line = {
                "id": "batch_" + req_id,
                "custom_id": custom_id,
                "response": {"status_code": status, "request_id": req_id, "body": reply},
                "error": None,
            }
            batch.results.append((status == 200, json.dumps(line).encode() + b"\n"))
        batch.malformed = malformed

    def _reply(
        self, endpoint: Endpoint, body: Body, fail_draw: float, malformed_draw: float, malformed: int, req_id: str
    ) -> tuple[int, Body, bool]:
        """Return the status and body a live request would get, or an injected fault; and if it is malformed."""
        server = self.server
        prompt = endpoint.read(body, server.strict_params)
        if not isinstance(prompt, Prompt):  # refused as a live request would be
            return 400, prompt, False
        if server.judge_host is not None and (refused := server.judge_host.refusal(body)) is not None:
            return 400, refused, False
        if fail_draw < server.batch_fail_rate or (
            server.batch_fail_always is not None and server.batch_fail_always(body)
        ):
            return 500, error_body("Injected batch failure", "server_error"), False
        cached = server.cached_tokens(body, prompt)
        if prompt.grader_prompt is not None and malformed_draw < server.batch_malformed_rate:
            return 200, endpoint.payload(body, prompt, _MALFORMED[malformed % 2], req_id, cached), True
        return 200, endpoint.payload(body, prompt, server.ok_content(body, prompt), req_id, cached), False

    def _status(self, batch: _Batch) -> str:
        if batch.cancelled is not None:
            return "cancelled"
        share = (self.clock() - batch.created_clock) / self.server.batch_delay if self.server.batch_delay else 1.0
        if share < _VALIDATING:
            return "validating"
        if batch.errors:
            return "failed"
        return "in_progress" if share < _IN_PROGRESS else "finalizing" if share < 1.0 else "completed"

    def _counts(self, batch: _Batch, status: str) -> dict[str, int]:
        if batch.cancelled is not None:
            return batch.cancelled[1]
        if status in ("validating", "failed"):
            return {"total": 0, "completed": 0, "failed": 0}
        if status == "in_progress":
            elapsed = self.clock() - batch.created_clock - _VALIDATING * self.server.batch_delay
            done = int(len(batch.results) * elapsed / ((_IN_PROGRESS - _VALIDATING) * self.server.batch_delay))
        else:
            done = len(batch.results)
        succeeded = sum(ok for ok, _ in batch.results[:done])
        return {"total": batch.total, "completed": succeeded, "failed": done - succeeded}

    def _view(self, batch: _Batch) -> Body:
        """The batch object as the API shows it now; the output files appear once it completes."""
        status = self._status(batch)
        if status == "completed" and not batch.files_made:
            batch.files_made = True
            ok = b"".join(line for succeeded, line in batch.results if succeeded)
            failed = b"".join(line for succeeded, line in batch.results if not succeeded)
            if ok:
                batch.output_file_id = self._add_file(f"{batch.id}_output.jsonl", "batch_output", ok)["id"]
            if failed:
                batch.error_file_id = self._add_file(f"{batch.id}_error.jsonl", "batch_output", failed)["id"]
        delay = self.server.batch_delay

        def reached(share: float, *statuses: str) -> int | None:
            return int(batch.created_wall + share * delay) if status in statuses else None

        created = int(batch.created_wall)
        return {
            "id": batch.id,
            "object": "batch",
            **batch.request,
            "errors": {"object": "list", "data": batch.errors} if status == "failed" else None,
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": created,
            "in_progress_at": reached(_VALIDATING, "in_progress", "finalizing", "completed"),
            "finalizing_at": reached(_IN_PROGRESS, "finalizing", "completed"),
            "completed_at": reached(1.0, "completed"),
            "failed_at": reached(_VALIDATING, "failed"),
            "expired_at": None,
            "expires_at": created + 24 * 3600,
            "cancelling_at": batch.cancelled[0] if batch.cancelled else None,
            "cancelled_at": batch.cancelled[0] if batch.cancelled else None,
            "request_counts": self._counts(batch, status),
        }

    async def _retrieve(self, request: web.Request) -> web.Response:
        if self._down():
            return error(503, "The server is temporarily unavailable", "server_error")
        batch = self.batches.get(request.match_info["id"])
        return web.json_response(self._view(batch)) if batch else error(404, "No such Batch", _BAD_REQUEST)

    async def _list(self, request: web.Request) -> web.Response:
        try:
            limit = int(request.query.get("limit", "20"))
        except ValueError:
            return error(400, "'limit' must be an integer", _BAD_REQUEST)
        if not 1 <= limit <= 100:
            return error(400, "'limit' must be between 1 and 100", _BAD_REQUEST)
        ids = list(reversed(self.batches))  # newest first: dicts keep creation order
        after = request.query.get("after")
        if after is not None:
            ids = ids[ids.index(after) + 1 :] if after in self.batches else []
        page = [self._view(self.batches[batch_id]) for batch_id in ids[:limit]]
        return web.json_response(
            {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": len(ids) > limit,
            }
        )

    async def _cancel(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return error(404, "No such Batch", _BAD_REQUEST)
        status = self._status(batch)
        if status in ("completed", "failed"):
            return error(400, f"Cannot cancel a batch with status '{status}'", _BAD_REQUEST)
        if batch.cancelled is None:
            batch.cancelled = (int(time.time()), self._counts(batch, status))
        return web.json_response(self._view(batch))
