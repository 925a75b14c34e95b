"""What the batch client keeps: its settings, the ledger that remembers batches across processes, and its own
record of each request waiting for an answer and each batch still open."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from pydantic import Field
from pydantic.dataclasses import dataclass as validated_dataclass

from healthbench.api.wire import Usage

# The Batch API's limits per batch: 50,000 requests and a 200 MB input file.
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1000 * 1000
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
# Seconds between status checks, as the settings and `--poll-interval` take them: every wait is bounded, and a
# batch takes minutes to hours. Tokens queued at once: the largest organization queue limits are some 10^10.
PollInterval = Annotated[float, Field(ge=0.01, le=3600, allow_inf_nan=False)]
BatchTokens = Annotated[int, Field(ge=1, le=10**12)]


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


@validated_dataclass(frozen=True)
class BatchSettings:
    """How batches are formed and watched."""

    poll_interval: PollInterval = 30.0
    settle: float = 1.0
    max_requests: int = MAX_REQUESTS
    max_bytes: int = MAX_BYTES
    completion_window: str = "24h"
    # False: submit what is needed, collect what is finished, and leave the rest out for the next session.
    wait: bool = True
    # Most estimated tokens queued in batches at once (the organization's batch queue limit for the model);
    # None: found by halving after a refusal.
    max_tokens: BatchTokens | None = None


@dataclass(frozen=True)
class BatchRecord:
    """A batch this run uploaded: its input file, and its id once the batch was created."""

    input_file_id: str
    batch_id: str | None
    purpose: str
    requests: int
    created: float


@dataclass
class QueuedRequest:
    """A request the batch client was asked for: its line, how to read its answer, the attempts it has had, and
    the callers waiting for it (equal requests are sent once)."""

    custom_id: str
    line: bytes
    parse: Callable[[str], Any]
    attempts: int = 0
    # The request's bytes as asked, and as its line carries them (without what the host refused: `api.hosts`).
    payload: bytes = b""
    sent: bytes = b""
    usage: Usage = field(default_factory=lambda: Usage(batch=True))
    waiters: list[asyncio.Future[tuple[Any, Usage]]] = field(default_factory=list)


@dataclass
class OpenBatch:
    """A batch submitted and not yet collected: its requests, their estimated tokens, and its last status."""

    input_file_id: str
    batch_id: str | None
    created: float
    members: set[str] = field(default_factory=set)
    tokens: int = 0
    status: str = "submitted"
    shown_status: str = ""
    shown_at: float = 0.0
    unclaimed: int = 0
