"""`healthbench serve` keeps its graders warm: sessions one after another, as a trainer's rollout loop sends them,
each get their reply's rubric items graded at once, in one grader round, pacing alone or through Redis; a GRPO
group of 8 replies is one round too. Every reward equals `healthbench grade`'s for the same reply, and every
reply costs exactly its rubric items in grader requests.

One grader round is told without timing anything: the fake holds each request until as many are in flight at once
as a round should send (its `gathering`, with a patience), so `max_in_flight` says whether they were
sent together. A key the server knows nothing of yet gets its first reply's items at once too: a served grader skips
the grading commands' slow start.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openreward")

from openreward import AsyncOpenReward, Message
from openreward.api.environments.types import TextBlock

from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.redisserver import RedisServer, needs_redis
from tests.reference import KEY
from tests.serving import graded_by_cli, served

ITEMS = 10  # rubric items a task: a group of 8 replies is 80 calls, more than the grading commands' budget of 64
GROUP = 8
TAGS = ("axis:accuracy", "level:example")
ROWS = [
    make_row(
        f"warm-{task}",
        prompt=(("user", f"Question {task}: I have had a cough for a week."),),
        rubrics=tuple(((-1) ** item * (item + 1), f"Criterion {item} of task {task}", TAGS) for item in range(ITEMS)),
    )
    for task in range(6)
]


def reply(task: int, candidate: int = 0) -> str:
    return f"Rest and fluids; see a doctor if it lasts past two weeks. ({task}.{candidate})"


async def lone_answers(url: str, fake: FakeOpenAI, tasks: range) -> list[dict[str, Any]]:
    """One session at a time, each answering its task through `answer`: per call, its reward, the grader
    requests it cost, and the most of them in flight at once."""
    client = AsyncOpenReward(api_key="local")
    env = client.environments.get("healthbench", variant="healthbench_answer", base_url=url)
    seen = []
    try:
        for task in tasks:
            async with env.session(split="test", index=task, secrets={"OPENAI_API_KEY": KEY}) as session:
                fake.reset()
                output = await session.call_tool("answer", {"response": reply(task)})
                seen.append({"reward": output.reward, "sent": fake.requests_total, "together": fake.max_in_flight})
    finally:
        await client.environments.aclose()
    return seen


async def group(url: str, fake: FakeOpenAI, task: int) -> dict[str, Any]:
    """A group of replies to one task scored in one request: their rewards, the requests, the most at once."""
    client = AsyncOpenReward(api_key="local")
    env = client.environments.get("healthbench", variant="healthbench_answer", base_url=url)
    try:
        async with env.session(split="test", index=task, secrets={"OPENAI_API_KEY": KEY}) as session:
            candidates = [[Message(role="assistant", blocks=[TextBlock(text=reply(task, i))])] for i in range(GROUP)]
            fake.reset()
            scores = await session.score_group(candidates)
            return {"rewards": [s.reward for s in scores], "sent": fake.requests_total, "together": fake.max_in_flight}
    finally:
        await client.environments.aclose()


def check(url: str, fake: FakeOpenAI, data: Path, tmp: Path) -> None:
    """Lone answers on tasks 0-3, then a group on task 4: one round each, the first too, rewards as `grade` gives."""
    # Every call's requests should all arrive: a patience of 10 s costs nothing then, and leaves room for a loaded
    # machine (through Redis, each start is a round trip to the store).
    fake.gathering.size, fake.gathering.patience = ITEMS, 10.0
    answers = asyncio.run(lone_answers(url, fake, range(4)))
    fake.gathering.size = ITEMS * GROUP
    scored = asyncio.run(group(url, fake, 4))
    fake.gathering.size = None
    assert [call["sent"] for call in answers] == [ITEMS] * 4
    # The first call of a key meets a pace that knows nothing, and sends all of its items at once all the same.
    assert [call["together"] for call in answers] == [ITEMS] * 4
    assert scored["sent"] == ITEMS * GROUP and scored["together"] == ITEMS * GROUP
    assert fake.base_url
    replies = {ROWS[task]["prompt_id"]: reply(task) for task in range(4)}
    replies |= {f"{ROWS[4]['prompt_id']}#{i}": reply(4, i) for i in range(GROUP)}
    graded = graded_by_cli(tmp, data_with_group(data, tmp), replies, fake.base_url)
    expected = [graded[ROWS[task]["prompt_id"]]["score"] for task in range(4)]
    assert [call["reward"] for call in answers] == pytest.approx(expected, abs=1e-9)
    group_expected = [graded[f"{ROWS[4]['prompt_id']}#{i}"]["score"] for i in range(GROUP)]
    assert scored["rewards"] == pytest.approx(group_expected, abs=1e-9)
    assert len(set(expected)) > 1 or len(set(group_expected)) > 1


def data_with_group(data: Path, tmp: Path) -> Path:
    """The rows, with task 4 once more under a name of its own per candidate, so `grade` grades every reply of
    the group (it takes one reply per task)."""
    copies = [{**ROWS[4], "prompt_id": f"{ROWS[4]['prompt_id']}#{i}"} for i in range(GROUP)]
    return write_jsonl(tmp / "rows-and-group.jsonl", [*ROWS[:4], *copies])


def test_sessions_one_after_another_each_cost_one_grader_round(data: Path, tmp_path: Path) -> None:
    with FakeOpenAI() as fake:
        assert fake.base_url
        with served(data, fake.base_url) as url:
            check(url, fake, data, tmp_path)


@needs_redis
def test_with_a_pace_store_too(data: Path, tmp_path: Path, redis: RedisServer) -> None:
    with FakeOpenAI() as fake:
        assert fake.base_url
        with served(data, fake.base_url, "--pace-store", redis.url) as url:
            check(url, fake, data, tmp_path)
