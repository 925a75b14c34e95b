"""The Batch API's files and objects as this project reads and writes them: the lines of input and output
files, how lines are split into batches, a batch's status as a line of text, and the lookups of a batch.

A batch line's `url` and a batch's `endpoint` are those of the client's API (`wire.Api.batch_url`): Chat
Completions lines for a chat grader, `/v1/responses` lines for a Responses grader. A line's body is spliced in
as the very bytes a live request sends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from healthbench.api.batch.records import TERMINAL, BatchRecord, BatchSettings
from healthbench.api.client import ApiClient
from healthbench.api.failures import provider_error
from healthbench.api.retrying import is_retryable
from healthbench.api.wire import Api, Usage
from healthbench.errors import InvalidResponse, RequestFailed, UnreadableAnswer

# How many pages of the batch list to search for a batch whose id was lost in a crash.
_LIST_PAGES = 20


@dataclass(frozen=True)
class Outcome:
    """One request's result in a batch: content, or why there is none."""

    content: str | None
    usage: Usage
    cause: str = ""
    retryable: bool = True
    cut: bool = False  # the output cap ended the answer (see `wire.Reading`)
    status: int | None = None  # a refused line's status and body, for what the host refuses (`api.hosts`)
    body: bytes = b""


def json_object(body: bytes) -> dict[str, Any]:
    """A Batch API answer (a file, a batch, a page of batches) as the JSON object it must be; `UnreadableAnswer`
    otherwise, which the client retries like any answer that cannot be read."""
    try:
        parsed = json.loads(body)
    except ValueError:
        raise UnreadableAnswer("not JSON") from None
    if not isinstance(parsed, dict):
        raise UnreadableAnswer("not a JSON object")
    return parsed


def with_id(body: bytes) -> dict[str, Any]:
    """A Batch API object that must have an id (a file uploaded, a batch created)."""
    parsed = json_object(body)
    if not isinstance(parsed.get("id"), str) or not parsed["id"]:
        raise UnreadableAnswer("no id")
    return parsed


def batch_errors(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The errors a failed batch lists (`errors.data`), those that are objects."""
    listed = state.get("errors")
    found = listed.get("data") if isinstance(listed, dict) else None
    return [error for error in found if isinstance(error, dict)] if isinstance(found, list) else []


def refused_batch(failure: RequestFailed) -> str:
    """A batch upload or creation refused outright, in words: the status and the provider's message."""
    error = provider_error(failure)
    message = error.message if error is not None and error.message else failure.cause
    return f"HTTP {failure.status}: {message}"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


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
    counts = _mapping(state.get("request_counts"))
    return (
        f"batch {batch_id}: {state.get('status')}, {counts.get('completed', 0)}/{counts.get('total', 0)} done, "
        f"{counts.get('failed', 0)} failed; {_elapsed(time.time() - created)} since submitted"
    )


async def batch_report(chats: Mapping[str, ApiClient], records: Iterable[BatchRecord], *, cancel: bool) -> list[str]:
    """A line per recorded batch with its status from the API (`chats` by purpose); with `cancel`, each batch
    still running is cancelled first. The ledger is left as it is: the next run collects what finished."""
    lines = []
    for record in records:
        chat = chats[record.purpose]
        if record.batch_id is None:
            lines.append(f"{record.purpose}: file {record.input_file_id} uploaded, its batch not recorded yet")
            continue
        path = f"/batches/{record.batch_id}"
        state = await chat.api("GET", path, read=json_object)
        if cancel and state.get("status") not in TERMINAL | {"cancelling"}:
            state = await chat.api("POST", path + "/cancel", read=json_object)
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
                reading = api.reading(body, batch=True)
            except InvalidResponse as exc:
                return Outcome(None, Usage(batch=True), str(exc))
            return Outcome(reading.content, reading.usage, cut=reading.cut)
        text = json.dumps(body)
        code = status if isinstance(status, int) else 500
        cause = f"HTTP {code} in batch: {text[:200]}"
        return Outcome(None, Usage(batch=True), cause, is_retryable(code), status=code, body=text.encode())
    error = record.get("error") or {}
    message = f"{error.get('code', 'error')}: {error.get('message', '')}" if isinstance(error, dict) else str(error)
    return Outcome(None, Usage(batch=True), f"batch error {message}")


def split_lines(lines: list[bytes], settings: BatchSettings, token_cap: int | None) -> list[int]:
    """How many of `lines`, in order, go in each batch: within the request and byte limits of a batch, and
    within `token_cap` estimated tokens when one is set (a line past every limit still goes, alone)."""
    sizes = [0]
    size = 0
    tokens = 0
    for line in lines:
        if sizes[-1] and (
            sizes[-1] >= settings.max_requests
            or size + len(line) > settings.max_bytes
            or (token_cap is not None and tokens + line_tokens(line) > token_cap)
        ):
            sizes.append(0)
            size = 0
            tokens = 0
        sizes[-1] += 1
        size += len(line)
        tokens += line_tokens(line)
    return sizes if sizes[-1] else []


async def find_batch(chat: ApiClient, input_file_id: str) -> str | None:
    """The id of the batch created from an uploaded file, found in the batch list (newest first), if any."""
    after: str | None = None
    for _ in range(_LIST_PAGES):
        query = "/batches?limit=100" + (f"&after={after}" if after else "")
        page = await chat.api("GET", query, read=json_object)
        listed = page.get("data")
        batches = [found for found in listed if isinstance(found, dict)] if isinstance(listed, list) else []
        for found in batches:
            if found.get("input_file_id") == input_file_id and found.get("id"):
                return str(found["id"])
        last = batches[-1].get("id") if batches else None
        if not page.get("has_more") or not isinstance(last, str):
            return None
        after = last
    return None


async def read_outcomes(chat: ApiClient, state: Mapping[str, Any]) -> dict[str, Outcome]:
    """The outcome of every line in a finished batch's output and error files, by custom_id."""
    outcomes: dict[str, Outcome] = {}
    for key in ("output_file_id", "error_file_id"):
        file_id = state.get(key)
        if not file_id:
            continue
        lines = await chat.api("GET", f"/files/{file_id}/content", read=bytes.splitlines)
        for text in lines:
            try:
                record = json.loads(text)
            except ValueError:
                continue  # a line that cannot be read names no request: its request is missing, and goes again
            if isinstance(record, dict):
                outcomes[str(record.get("custom_id"))] = read_output_line(chat.wire, record)
    return outcomes
