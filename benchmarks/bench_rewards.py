"""How long a trainer waits for a reward from `healthbench serve`, as a ratio of one grader round.

A trainer's rollout loop sends its `answer` calls one at a time and waits for each reward; a GRPO trainer sends a
group of replies in one `score_group`. Against the fake grader answering in `--latency` seconds (1 s by default),
with the server's default settings, this prints per row: the first `answer` call of a fresh server, the median of
`--calls` lone `answer` calls (one session at a time, through the SDK's client), and the median of `--groups`
`score_group` requests of `--group` replies, each divided by one grader round (a request sent to the fake
directly, timed here); and whether every reply cost exactly its rubric items in grader requests. One row with each
process pacing alone, one sharing its pace through a throwaway redis-server (`--pace-store`).

The rows are made up (bench_serve's, about 12 rubric items each); the fake grader runs on a thread of this process,
the server in a process of its own. `--src DIR` runs the server from another source tree, for instance a checkout
of an earlier commit, to compare.

    .venv/bin/python benchmarks/bench_rewards.py [--latency 1] [--calls 8] [--groups 3] [--group 8] [--src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
from bench_replicas import redis_server
from bench_serve import make_row, served

from healthbench.testing import GRADER_MARKER, FakeOpenAI

KEY = "sk-bench-rewards"


@contextmanager
def server(data: Path, grader_url: str, store: str | None, src: Path | None) -> Iterator[str]:
    """`healthbench serve --data DATA` with default settings (and `--pace-store STORE`), from `src` if given; its
    URL."""
    pace = ["--pace-store", store] if store else []
    with served(data, grader_url, src, {"HEALTHBENCH_PACE_STORE": None}, pace) as (url, _):
        yield url


async def one_round(grader_url: str, rounds: int = 3) -> float:
    """Seconds of one grader request sent straight to the fake: the median of `rounds`."""
    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": f"{GRADER_MARKER} [5] Says hello"}]}
    times = []
    async with aiohttp.ClientSession() as http:
        for _ in range(rounds):
            started = time.perf_counter()
            async with http.post(f"{grader_url}/chat/completions", json=body) as response:
                await response.read()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def reply(task: int, candidate: int = 0) -> str:
    return f"Rest, fluids, and see a doctor if it lasts more than three days. (task {task}, reply {candidate})"


async def rewards(url: str, calls: int, groups: int, group: int) -> dict[str, Any]:
    """`calls` lone `answer` calls, then `groups` score_group requests of `group` replies; their seconds each."""
    from openreward import AsyncOpenReward, Message
    from openreward.api.environments.types import TextBlock

    client = AsyncOpenReward(api_key="bench")
    env = client.environments.get("healthbench", variant="healthbench_answer", base_url=url)
    secrets = {"OPENAI_API_KEY": KEY}
    answers: list[float] = []
    scored: list[float] = []
    try:
        for task in range(calls):
            async with env.session(split="test", index=task, secrets=secrets) as session:
                await session.get_prompt()
                started = time.perf_counter()
                output = await session.call_tool("answer", {"response": reply(task)})
                answers.append(time.perf_counter() - started)
                assert output.reward is not None
        for task in range(calls, calls + groups):
            async with env.session(split="test", index=task, secrets=secrets) as session:
                candidates = [
                    [Message(role="assistant", blocks=[TextBlock(text=reply(task, i))])] for i in range(group)
                ]
                started = time.perf_counter()
                scores = await session.score_group(candidates)
                scored.append(time.perf_counter() - started)
                assert len(scores) == group and all(score.reward is not None for score in scores)
    finally:
        await client.environments.aclose()
    return {"answers": answers, "groups": scored}


def main() -> None:
    """Run each row and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds the fake grader takes to answer")
    parser.add_argument("--calls", type=int, default=8, help="lone answer calls, one session at a time")
    parser.add_argument("--groups", type=int, default=3, help="score_group requests")
    parser.add_argument("--group", type=int, default=8, help="replies in each score_group request")
    parser.add_argument("--pace", default="alone,redis", help="alone, redis, or both (comma-separated)")
    parser.add_argument("--src", type=Path, help="run the server from this source tree (an earlier checkout)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each row as it is measured
    folder = Path(tempfile.mkdtemp(prefix="bench-rewards-"))
    data = folder / "rows.jsonl"
    rng = random.Random(0)
    rows = [make_row(rng, i) for i in range(args.calls + args.groups)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    items = [len(row["rubrics"]) for row in rows]
    expected = sum(items[: args.calls]) + args.group * sum(items[args.calls :])
    print(
        f"fake grader at {args.latency:g} s; {args.calls} lone answer calls, then {args.groups} score_group "
        f"requests of {args.group} replies; {statistics.mean(items):.1f} rubric items a task "
        f"({min(items)}-{max(items)}); the server's default settings, from {args.src or 'this tree'}\n"
    )
    print("| pace | one grader round | first answer | answer, median | score_group of 8, median | grader requests |")
    print("|---|---|---|---|---|---|")
    for pace in args.pace.split(","):
        with FakeOpenAI(latency=args.latency, record=False) as fake, pace_store(pace, folder) as store:
            assert fake.base_url
            round_trip = asyncio.run(one_round(fake.base_url))
            fake.reset()
            with server(data, fake.base_url, store, args.src) as url:
                seen = asyncio.run(rewards(url, args.calls, args.groups, args.group))
            sent = fake.responses_by_kind["ok"]
        answers, groups = seen["answers"], seen["groups"]
        print(
            f"| {'shared (Redis)' if store else 'alone'} | {round_trip:.2f} s | {answers[0] / round_trip:.2f}x | "
            f"{statistics.median(answers) / round_trip:.2f}x | {statistics.median(groups) / round_trip:.2f}x | "
            f"{sent} for {expected} rubric items{'' if sent == expected else ' (MISMATCH)'} |"
        )


@contextmanager
def pace_store(pace: str, folder: Path) -> Iterator[str | None]:
    """A throwaway Redis's URL for `redis`, None for `alone`."""
    if pace == "alone":
        yield None
        return
    with redis_server(folder) as url:
        yield url


if __name__ == "__main__":
    main()
