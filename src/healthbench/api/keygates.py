"""The gate of each key at each endpoint: one `pacing.Gate` shared by every client that sends with that key there.

Rate limits belong to a key at an endpoint, not to a client object: clients that share both (the policy and the
grader of one run, say; Chat and Responses calls of one key) must slow down together. OpenAI's limits are per model
as well, so two models on one key share a pace they need not: slower, never refused. With a pace store, the pace is
shared with every process that names the same store. OpenAI's limits are per organization too, so two keys at one
endpoint may spend one limit: the gates of every key at an endpoint are siblings (`pacing.siblings`), and two keys
seen to share a limit pace together from then on.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import TYPE_CHECKING

from healthbench.api.pacing import Gate
from healthbench.api.pacing.siblings import Siblings
from healthbench.api.pacing.state import LocalPace, PaceState, remembered

if TYPE_CHECKING:  # the Redis client is imported only by a run that shares its pace
    from healthbench.api.pacing.store import PaceStore

# Weak values: a gate lives as long as its clients.
_GATES: weakref.WeakValueDictionary[tuple[str, str | None], Gate] = weakref.WeakValueDictionary()
# The gates of each endpoint (through each store, or none), as long as one of them lives.
_SIBLINGS: weakref.WeakValueDictionary[tuple[str, str | None], Siblings[PaceState]] = weakref.WeakValueDictionary()


def key_slot(base_url: str, api_key: str | None) -> str:
    """A key at an endpoint, as a digest: what a pace is shared by, never the key itself."""
    return hashlib.sha256(f"{base_url.rstrip('/')}\n{api_key or ''}".encode()).hexdigest()


def gate_for(base_url: str, api_key: str | None, store: PaceStore | None) -> Gate:
    """The gate of `api_key` at `base_url` (through `store`'s shared pace, if given): made by the first client
    that asks for it, handed to every other while one of them lives."""
    slot = key_slot(base_url, api_key)
    entry = (slot, store.url if store else None)
    gate = _GATES.get(entry)
    if gate is None:
        gate = Gate(store.pace(slot) if store else LocalPace(learned=remembered(slot)))
        _GATES[entry] = gate
        endpoint = (base_url.rstrip("/"), entry[1])
        siblings = _SIBLINGS.get(endpoint)
        if siblings is None:
            siblings = Siblings()
            _SIBLINGS[endpoint] = siblings
        siblings.add(gate, slot)
        gate.siblings = siblings
    return gate
