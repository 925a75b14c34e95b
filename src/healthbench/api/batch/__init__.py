"""The same requests through OpenAI's Batch API, at half the price: `BatchClient` is a `Completer` like the live
client, `files` reads and writes the Batch API's lines, `records` holds the settings and the ledger."""

from healthbench.api.batch.client import BatchClient
from healthbench.api.batch.records import BatchSettings

__all__ = ["BatchClient", "BatchSettings"]
