"""The Batch API's objects as this project uses them: settings, the ledger that remembers batches across
processes, the lines of input and output files, and a batch's status as a line of text.

A batch line's `url` and a batch's `endpoint` are those of the client's API (`wire.Api.batch_url`): Chat
Completions lines for a chat grader, `/v1/responses` lines for a Responses grader. A line's body is spliced in
as the very bytes a live request sends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

# The Batch API's limits per batch: 50,000 requests and a 200 MB input file.
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1000 * 1000
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})


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
class BatchRecord:
    """A batch this run uploaded: its input file, and its id once the batch was created."""

    input_file_id: str
    batch_id: str | None
    purpose: str
    requests: int
    created: float
