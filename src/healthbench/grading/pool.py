"""`GraderPool`: graders shared by the callers of one settings-and-key, apart from the settings themselves."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from healthbench.api.client import Budget
from healthbench.grading.grader import Grader
from healthbench.grading.settings import GraderConfig


@dataclass
class _Lease:
    grader: Grader
    users: int = 0


class GraderPool:
    """One grader per distinct settings and key, shared by its callers while any of them is grading.

    Callers of one key share connections and the client's rate pacing; the last one to finish closes the
    client, so a key seen once leaves nothing behind. With `concurrency`, every grader draws on one budget of
    that size (growing with the limits up to `ceiling`, if that is larger); without, each on its own settings'
    budget.
    """

    def __init__(self, concurrency: int | None = None, ceiling: int | None = None) -> None:
        self._budget = Budget(concurrency, ceiling) if concurrency is not None else None
        # Keyed by a digest, so the raw key is held only where it is used: the client's headers.
        self._leases: dict[str, _Lease] = {}

    @asynccontextmanager
    async def lease(self, config: GraderConfig) -> AsyncIterator[Grader]:
        """The grader of `config` (its key included), for the duration of the block."""
        secret = config.api_key.get_secret_value() if config.api_key is not None else ""
        slot = hashlib.sha256(f"{config.model_dump_json()}\n{secret}".encode()).hexdigest()
        lease = self._leases.get(slot)
        if lease is None:
            lease = self._leases[slot] = _Lease(config.build(budget=self._budget))
        lease.users += 1
        try:
            yield lease.grader
        finally:
            lease.users -= 1
            if lease.users == 0:
                del self._leases[slot]
                await lease.grader.client.aclose()
