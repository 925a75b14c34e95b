"""`GraderPool`: graders shared by their callers and kept warm between them, per event loop, within a bound.

Against the loopback fake grader; the grader's client is inspected only for whether its HTTP session is open.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import SecretStr

from healthbench.api.client import ApiClient
from healthbench.grading.grader import Grader
from healthbench.grading.settings import GraderConfig
from healthbench.integrations.pool import GraderPool
from healthbench.testing import FakeOpenAI


def config(fake: FakeOpenAI, key: str = "sk-pool-0") -> GraderConfig:
    assert fake.base_url
    return GraderConfig(base_url=fake.base_url, api_key=SecretStr(key), max_attempts=1)


def is_open(grader: Grader) -> bool:
    """Whether the grader's client holds an HTTP session (it opens one on its first request)."""
    client = grader.client
    assert isinstance(client, ApiClient)
    return client._session is not None and not client._session.closed


async def used(pool: GraderPool, settings: GraderConfig) -> Grader:
    """Lease the grader of `settings`, send one grader request through it, and give it back."""
    async with pool.lease(settings) as grader:
        await grader.client.complete({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}, str)
        return grader


async def until(condition: Any) -> None:
    """Wait until `condition()` holds: the pool's keeper runs on its own time (bounded: 10 s)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def test_callers_one_after_another_share_one_open_grader(module_fake: FakeOpenAI) -> None:
    async def run() -> None:
        pool = GraderPool()
        first = await used(pool, config(module_fake))
        assert is_open(first) and pool.live() == 1  # kept warm after its caller left
        second = await used(pool, config(module_fake))
        assert second is first  # the same client: its connections and its pace's learning
        other = await used(pool, config(module_fake, "sk-pool-1"))
        assert other is not first and pool.live() == 2  # a key of its own

    asyncio.run(run())


def test_an_idle_grader_closes_after_its_time(module_fake: FakeOpenAI) -> None:
    async def run() -> None:
        pool = GraderPool(idle=0.05)
        grader = await used(pool, config(module_fake))
        await until(lambda: pool.live() == 0)
        assert not is_open(grader)
        assert await used(pool, config(module_fake)) is not grader  # a new one, once closed

    asyncio.run(run())


def test_idle_graders_past_the_bound_close_longest_idle_first(module_fake: FakeOpenAI) -> None:
    async def run() -> None:
        pool = GraderPool(most_idle=2)
        graders = [await used(pool, config(module_fake, f"sk-bound-{i}")) for i in range(3)]
        await until(lambda: pool.live() == 2)
        assert [is_open(grader) for grader in graders] == [False, True, True]
        # A grader in use is never closed for the bound: one held, at most two idle besides it.
        async with pool.lease(config(module_fake, "sk-bound-held")):
            await used(pool, config(module_fake, "sk-bound-3"))
            await until(lambda: pool.live() == 3)
            assert [is_open(grader) for grader in graders] == [False, False, True]

    asyncio.run(run())


def test_graders_close_with_their_loop_and_are_never_shared_across_loops(module_fake: FakeOpenAI) -> None:
    pool = GraderPool()
    first = asyncio.run(used(pool, config(module_fake)))
    # asyncio.run cancels what is left of the loop's tasks as it ends: the keeper closes its graders then.
    assert pool.live() == 0 and not is_open(first)
    assert asyncio.run(used(pool, config(module_fake))) is not first


def test_without_an_idle_time_a_grader_closes_with_its_last_caller(module_fake: FakeOpenAI) -> None:
    async def run() -> None:
        pool = GraderPool(idle=0)
        async with pool.lease(config(module_fake)) as grader:
            assert await used(pool, config(module_fake)) is grader  # shared while a caller holds it
            assert is_open(grader)
        assert pool.live() == 0 and not is_open(grader)

    asyncio.run(run())
