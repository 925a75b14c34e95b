"""The Batch API's objects as this project uses them: settings, the ledger that remembers batches across
processes, the lines of input and output files, and a batch's status as a line of text.

A batch line's `url` and a batch's `endpoint` are those of the client's API (`wire.Api.batch_url`): Chat
Completions lines for a chat grader, `/v1/responses` lines for a Responses grader. A line's body is spliced in
as the very bytes a live request sends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .client import ChatClient, is_retryable
from .store import BatchRecord
from .wire import Api, InvalidResponse, Usage

# The Batch API's limits per batch: 50,000 requests and a 200 MB input file.
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1000 * 1000
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
# How many pages of the batch list to search for a batch whose id was lost in a crash.
_LIST_PAGES = 20


class BatchLedger(Protocol):
    """Where batches are remembered across processes (implemented by `store.Store`)."""

    def record_upload(self, input_file_id: str, purpose: str, requests: Iterable[tuple[str, int]]) -> None:
        """An uploaded input file and the (custom_id, attempt) of each request in it."""

    def record_batch_id(self, input_file_id: str, batch_id: str) -> None:
        """The batch created from an uploaded file."""

    def close_batch(self, input_file_id: str) -> None:
        """A batch whose results have been taken in."""

    def open_batches(self) -> list[BatchRecord]:
        """Batches not yet taken in."""

    def batch_request(self, custom_id: str) -> tuple[str, int] | None:
        """The input file that last carried a request, and its attempt number there."""


@dataclass(frozen=True)
class BatchSettings:
    """How batches are formed and watched."""

    poll_interval: float = 30.0
    settle: float = 1.0
    max_requests: int = MAX_REQUESTS
    max_bytes: int = MAX_BYTES
    completion_window: str = "24h"
    # False: submit what is needed, collect what is finished, and leave the rest out for the next session.
    wait: bool = True
    # Most estimated tokens queued in batches at once (the organization's batch queue limit for the model);
    # None: found by halving after a refusal.
    max_tokens: int | None = None


@dataclass(frozen=True)
class Outcome:
    """One request's result in a batch: content, or why there is none."""

    content: str | None
    usage: Usage
    cause: str = ""
    retryable: bool = True


def input_line(api: Api, custom_id: str, payload: bytes) -> bytes:
    """One line of a batch input file; the body is spliced in as the very bytes a live request sends, never
    re-serialised."""
    head = json.dumps({"custom_id": custom_id, "method": "POST", "url": api.batch_url})
    return head[:-1].encode() + b', "body": ' + payload + b"}\n"


def line_tokens(line: bytes) -> int:
    """The tokens a line is counted for in the queue, estimated: four bytes a token overstates a JSON line's
    tokens, which is the safe side of a queue limit."""
    return len(line) // 4


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def status_line(batch_id: str | None, state: Mapping[str, Any], created: float) -> str:
    """A batch's status, request counts and age, as shown while waiting and by `healthbench batches`."""
    counts = state.get("request_counts") or {}
    return (
        f"batch {batch_id}: {state.get('status')}, {counts.get('completed', 0)}/{counts.get('total', 0)} done, "
        f"{counts.get('failed', 0)} failed; {_elapsed(time.time() - created)} since submitted"
    )


async def batch_report(chats: Mapping[str, ChatClient], records: Iterable[BatchRecord], *, cancel: bool) -> list[str]:
    """A line per recorded batch with its status from the API (`chats` by purpose); with `cancel`, each batch
    still running is cancelled first. The ledger is left as it is: the next run collects what finished."""
    lines = []
    for record in records:
        chat = chats[record.purpose]
        if record.batch_id is None:
            lines.append(f"{record.purpose}: file {record.input_file_id} uploaded, its batch not recorded yet")
            continue
        path = f"/batches/{record.batch_id}"
        state = json.loads(await chat.api("GET", path))
        if cancel and state.get("status") not in TERMINAL | {"cancelling"}:
            state = json.loads(await chat.api("POST", path + "/cancel"))
        lines.append(f"{record.purpose}: {status_line(record.batch_id, state, record.created)}")
    return lines


def read_output_line(api: Api, record: Mapping[str, Any]) -> Outcome:
    """A line of a batch output or error file as an outcome; its body is read as `api` reads a live answer."""
    response = record.get("response")
    if isinstance(response, dict):
        status = response.get("status_code")
        body = response.get("body")
        if status == 200 and isinstance(body, dict):
            try:
                content, usage = api.read(body, batch=True)
            except InvalidResponse as exc:
                return Outcome(None, Usage(batch=True), str(exc))
            return Outcome(content, usage)
        text = json.dumps(body)[:200]
        code = status if isinstance(status, int) else 500
        return Outcome(None, Usage(batch=True), f"HTTP {code} in batch: {text}", is_retryable(code))
    error = record.get("error") or {}
    message = f"{error.get('code', 'error')}: {error.get('message', '')}" if isinstance(error, dict) else str(error)
    return Outcome(None, Usage(batch=True), f"batch error {message}")


def split_lines(lines: list[bytes], settings: BatchSettings, token_cap: int | None) -> list[int]:
    """How many of `lines`, in order, go in each batch: within the request and byte limits of a batch, and
    within `token_cap` estimated tokens when one is set (a line past every limit still goes, alone)."""
    sizes = [0]
    size = tokens = 0
    for line in lines:
        if sizes[-1] and (
            sizes[-1] >= settings.max_requests
            or size + len(line) > settings.max_bytes
            or (token_cap is not None and tokens + line_tokens(line) > token_cap)
        ):
            sizes.append(0)
            size = tokens = 0
        sizes[-1] += 1
        size += len(line)
        tokens += line_tokens(line)
    return sizes if sizes[-1] else []


async def find_batch(chat: ChatClient, input_file_id: str) -> str | None:
    """The id of the batch created from an uploaded file, found in the batch list (newest first), if any."""
    after: str | None = None
    for _ in range(_LIST_PAGES):
        query = "/batches?limit=100" + (f"&after={after}" if after else "")
        page = json.loads(await chat.api("GET", query))
        for found in page.get("data", []):
            if found.get("input_file_id") == input_file_id:
                return str(found["id"])
        if not page.get("has_more") or not page.get("data"):
            return None
        after = page["data"][-1]["id"]
    return None


async def read_outcomes(chat: ChatClient, state: Mapping[str, Any]) -> dict[str, Outcome]:
    """The outcome of every line in a finished batch's output and error files, by custom_id."""
    outcomes: dict[str, Outcome] = {}
    for key in ("output_file_id", "error_file_id"):
        file_id = state.get(key)
        if not file_id:
            continue
        content = await chat.api("GET", f"/files/{file_id}/content")
        for text in content.splitlines():
            if text.strip():
                record = json.loads(text)
                outcomes[str(record.get("custom_id"))] = read_output_line(chat.wire, record)
    return outcomes
