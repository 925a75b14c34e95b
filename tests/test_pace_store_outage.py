"""The shared pace's Redis stopped in mid-run and started again: `eval` and `serve` replicas keep going on a local
pace with one log line, rejoin the shared pace once it is back, and lose nothing (a real redis-server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_client
from openreward import AsyncOpenReward

from healthbench.api.keygates import key_slot
from healthbench.testing import FakeOpenAI
from healthbench.testing.limits import RateLimits
from tests.conftest import make_row, numbered_rows, write_jsonl
from tests.redisserver import RedisServer, needs_redis, redis_server
from tests.reference import KEY
from tests.serving import served_with_log
from tests.test_eval import run_eval

pytestmark = needs_redis
LOST = "pace store redis://127.0.0.1:{port}/0 lost"


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of each test's own, not the module's shared one: each test takes it down."""
    yield from redis_server(tmp_path)


def shared_rpm(redis: RedisServer, slot: str) -> float | None:
    """The limit the store holds for a key, None when it holds none (a store restarted empty)."""
    client = redis_client.Redis.from_url(redis.url, decode_responses=True)
    try:
        value = client.hget(f"healthbench:pace:{{{slot}}}", "rpm")
    finally:
        client.close()
    return None if value is None else float(value)


def test_eval_keeps_going_through_an_outage_with_one_line_and_the_same_metrics(
    tmp_path: Path, redis: RedisServer
) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(40))
    answered = 0

    def outage(body: dict[str, Any]) -> None:
        # The store goes away after 30 answers and comes back 30 answers later, while the run goes on.
        nonlocal answered
        answered += 1
        if answered == 30:
            redis.kill()
        elif answered == 60:
            redis.start()

    with FakeOpenAI(respond=outage, limits=RateLimits(rpm=60_000)) as server:
        url = server.base_url or ""
        shared = run_eval(data, tmp_path / "shared", url, "--pace-store", redis.url)
        refused = server.responses_by_kind["rate_limited"]
        server.respond = None
        server.reset()
        assert run_eval(data, tmp_path / "alone", url).exit_code == 0
    assert shared.exit_code == 0, shared.output
    assert answered >= 120 and refused == 0
    assert shared.output.count(LOST.format(port=redis.port)) == 1, shared.output
    assert "Traceback" not in shared.output
    metrics = (tmp_path / "shared" / "metrics.json").read_bytes()
    assert metrics == (tmp_path / "alone" / "metrics.json").read_bytes()


async def _rewards(base_url: str, replies: list[tuple[int, str]]) -> list[float | None]:
    """One session per (task index, reply), each answered with its reply: the rewards given."""
    client = AsyncOpenReward(api_key="local")
    env = client.environments.get("healthbench", base_url=base_url)
    try:
        rewards = []
        for index, reply in replies:
            async with env.session(split="test", index=index, secrets={"OPENAI_API_KEY": KEY}) as session:
                rewards.append((await session.call_terminal_tool(reply)).reward)
        return rewards
    finally:
        await client.environments.aclose()


def test_serve_keeps_going_through_an_outage_and_rejoins_the_shared_pace(tmp_path: Path, redis: RedisServer) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row(f"t{i}") for i in range(4)])
    replies = [(index, f"Rest and drink water, task {index}.") for index in range(4)]
    with FakeOpenAI(limits=RateLimits(rpm=60_000)) as server:
        slot = key_slot(server.base_url or "", KEY)
        environment = {"HEALTHBENCH_GRADER_API_KEY": KEY}
        with served_with_log(data, server.base_url, "--pace-store", redis.url, env=environment) as (url, lines):
            before = asyncio.run(_rewards(url, replies))
            assert shared_rpm(redis, slot) == 60_000  # learned from the headers and shared
            redis.kill()
            during = asyncio.run(_rewards(url, replies))
            redis.start()
            assert shared_rpm(redis, slot) is None  # restarted empty
            # Graded until the replica has found the store back (it looks every 2 s while it is gone) and told it
            # what it learned: the shared pace again.
            after: list[float | None] = []
            deadline = time.monotonic() + 120
            while shared_rpm(redis, slot) is None and time.monotonic() < deadline:
                after = asyncio.run(_rewards(url, replies))
                assert after == before
            log = "".join(lines)
        assert server.responses_by_kind["rate_limited"] == 0
    assert None not in before and during == before and after == before
    assert shared_rpm(redis, slot) == 60_000
    assert log.count(LOST.format(port=redis.port)) == 1, log
    assert "Traceback" not in log
