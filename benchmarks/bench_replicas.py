"""`healthbench serve` replicas on one grader key: how much of the key's limit they reach, and how much is refused,
each pacing alone or all sharing one pace through Redis (`HEALTHBENCH_PACE_STORE`).

The matrix of issue 29 for `serve`: each limiter (the default one, which forgives a debt past one window and gives
exact hints, and the hard one, `RateLimits.hard`: every refusal counted into a debt without bound, hints one
request short) x the x-ratelimit headers or none (the 429s' messages still name the limit) x refused requests
counted against the limit or not, against a grader limited to `--rpm` requests a minute; for each, one replica,
three sharing one Redis, and three each pacing alone (which together overrun the key's limit). Graded sessions
spread over the replicas in turn (a load balancer), `--at-once` at a time, `--latency` +/- `--jitter` seconds a
grader call. Prints one row each: the share of the limit reached over the whole wall time, the share of grader
requests answered 429, and whether every session was rewarded.

The fake grader runs in this process, on a thread of its own; each replica is a process of its own; a throwaway
redis-server is started on a free loopback port unless `--redis-url` names one (its database is flushed between
rows).

    .venv/bin/python benchmarks/bench_replicas.py [--sessions 300] [--at-once 90] [--rpm 6000]
        [--setups 1-alone,3-shared,3-alone] [--limiters default,hard] [--headers yes,no] [--counted yes,no]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from bench_serve import free_port, make_row, wait_until_answered

from healthbench.testing import FakeOpenAI
from healthbench.testing.limits import RateLimits


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A throwaway redis-server on a free loopback port, with no persistence; its URL."""
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server), or pass --redis-url")
    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*command, "--dir", str(folder)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        yield url
    finally:
        client.close()
        process.kill()
        process.wait()


@contextmanager
def the_store(given: str | None, folder: Path) -> Iterator[str]:
    """The Redis named, or a throwaway one."""
    if given:
        yield given
        return
    with redis_server(folder) as url:
        yield url


@contextmanager
def replicas(count: int, data: Path, grader_url: str, store: str | None) -> Iterator[list[str]]:
    """`count` serve processes on the rows, grading at `grader_url`, sharing `store` if given; their base URLs."""
    env = dict(os.environ, OPENREWARD_DISABLE_UPDATE_CHECK="1", HEALTHBENCH_GRADER_BASE_URL=grader_url)
    env.pop("HEALTHBENCH_PACE_STORE", None)
    if store:
        env["HEALTHBENCH_PACE_STORE"] = store
    ports = [free_port() for _ in range(count)]
    command = [sys.executable, "-m", "healthbench", "serve", "--data", str(data), "--host", "127.0.0.1"]
    log = (data.parent / "replicas.log").open("a")
    processes = [
        subprocess.Popen([*command, f"--port={port}"], env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
        for port in ports
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        started = time.perf_counter()
        for url, process in zip(urls, processes, strict=True):
            wait_until_answered(url + "/health", None, started, process)
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()
        log.close()


async def sessions(urls: list[str], count: int, at_once: int, tasks: int) -> tuple[float, list[float | None]]:
    """Graded sessions through the SDK client, spread over the replicas in turn; the wall time and rewards."""
    from openreward import AsyncOpenReward

    client = AsyncOpenReward(api_key="bench")
    envs = [client.environments.get("healthbench", base_url=url) for url in urls]
    gate = asyncio.Semaphore(at_once)

    async def one(i: int) -> float | None:
        env = envs[i % len(envs)]
        secrets = {"OPENAI_API_KEY": "sk-bench-replicas"}
        try:
            async with gate, env.session(split="test", index=i * 7919 % tasks, secrets=secrets) as session:
                await session.get_prompt()
                output = await session.call_terminal_tool(f"Rest and fluids; see a doctor if it lasts. ({i})")
                return float(output.reward) if output.reward is not None else None
        except Exception:
            return None

    try:
        started = time.perf_counter()
        rewards = await asyncio.gather(*(one(i) for i in range(count)))
        return time.perf_counter() - started, list(rewards)
    finally:
        await client.environments.aclose()


def limits_for(limiter: str, rpm: float, headers: bool, counted: bool) -> RateLimits:
    """The default limiter (debt forgiven past a window, exact hints) or the hard one (`RateLimits.hard`)."""
    if limiter == "hard":
        return RateLimits.hard(rpm, headers=headers, count_refused=counted)
    return RateLimits(rpm=rpm, headers=headers, count_refused=counted)


def main() -> None:
    """Run every row and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--at-once", type=int, default=90)
    parser.add_argument("--rpm", type=float, default=6000)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--jitter", type=float, default=0.1)
    parser.add_argument("--redis-url", help="a Redis to share the pace through (else a throwaway one)")
    parser.add_argument(
        "--setups", default="1-alone,3-shared,3-alone", help="replicas and their pace: N-alone or N-shared"
    )
    parser.add_argument("--limiters", default="default,hard", help="default, hard, or both")
    parser.add_argument("--headers", default="yes,no", help="with x-ratelimit headers, without, or both")
    parser.add_argument("--counted", default="yes,no", help="refused requests counted against the limit, or not")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each row as it is measured
    folder = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    data = folder / "rows.jsonl"
    rng = random.Random(0)
    data.write_text("".join(json.dumps(make_row(rng, i)) + "\n" for i in range(args.tasks)), encoding="utf-8")
    rate = args.rpm / 60
    print(
        f"{args.sessions} sessions, {args.at_once} at a time, on {args.tasks} made-up tasks; grader limit "
        f"{args.rpm:.0f} RPM, {args.latency * 1000:.0f} +/- {args.jitter * 1000:.0f} ms a call\n"
    )
    print(
        "| limiter | x-ratelimit headers | refused requests | replicas | pace | share of the limit | "
        "requests answered 429 | wall | rewarded |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    setups = [(int(count), pace == "shared") for count, pace in (setup.split("-") for setup in args.setups.split(","))]
    with the_store(args.redis_url, folder) as store_url:
        for limiter in args.limiters.split(","):
            for headers in [choice == "yes" for choice in args.headers.split(",")]:
                for counted in [choice == "yes" for choice in args.counted.split(",")]:
                    for count, shared in setups:
                        limits = limits_for(limiter, args.rpm, headers, counted)
                        if shared:
                            redis.Redis.from_url(store_url).flushdb()
                        with FakeOpenAI(
                            limits=limits, latency=args.latency, latency_jitter=args.jitter, record=False
                        ) as fake:
                            assert fake.base_url
                            with replicas(count, data, fake.base_url, store_url if shared else None) as urls:
                                wall, rewards = asyncio.run(sessions(urls, args.sessions, args.at_once, args.tasks))
                            answered, refused = fake.limiter.answered, fake.responses_by_kind["rate_limited"]
                        rewarded = sum(reward is not None for reward in rewards)
                        share, refusals = answered / wall / rate, refused / max(1, answered + refused)
                        print(
                            f"| {limiter} | {'yes' if headers else 'no'} | {'counted' if counted else 'not counted'} "
                            f"| {count} | {'shared (Redis)' if shared else 'each its own'} | {share:.0%} | "
                            f"{refusals:.2%} | {wall:.1f} s | {rewarded}/{len(rewards)} |"
                        )


if __name__ == "__main__":
    main()
