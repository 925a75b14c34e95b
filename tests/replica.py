"""One replica for tests/test_replicas.py: `python -m tests.replica BASE_URL STORE_URL REQUESTS` sends that many
chat requests through an `ApiClient` whose pace is shared through the store, then prints how many came back."""

from __future__ import annotations

import asyncio
import sys

from healthbench.api.client import ApiClient
from healthbench.api.pacing.store import PaceStore


async def main(base_url: str, store_url: str, requests: int) -> int:
    store = PaceStore(store_url)
    store.check()
    client = ApiClient(base_url, "sk-replicas", concurrency=32, pace_store=store)
    body = {"model": "m", "messages": [{"role": "user", "content": "Is a fever of 38.5 C a worry?"}], "max_tokens": 50}
    try:
        replies = await asyncio.gather(*(client.complete(body, str) for _ in range(requests)))
    finally:
        await client.aclose()
        await store.aclose()
    return len(replies)


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
