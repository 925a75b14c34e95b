"""How long an OpenRLHF step waits for its rewards from `healthbench serve`'s `/openrlhf`, in grader rounds.

OpenRLHF 0.11 posts one request per rollout, every rollout of a step at once, each on an HTTP session of its own
with the token in the URL (Basic auth). This sends a step that way: `--requests` one-sample requests at once (each
a different task, with its rubric items to grade), against the fake grader answering in `--latency` seconds, and
times the step from the first request sent to the last reward back, divided by one grader round (a request sent
to the fake directly). Per row a fresh server: its first step (a key's first calls start slowly: the pace's slow
start), then the median of `--steps` more (warm graders, the pace learnt). The last step's rewards are compared
with `healthbench grade`'s for the same replies against the same fake.

The server runs with its default settings (a grader budget of 256 calls in flight; the fake names no limits, so a
key's first calls start slowly: one, then three more for each answer), plus `--serve-args` (for instance
`"--concurrency 1024"`, the budget, or `"--grader-rpm 30000 --grader-tpm 150000000"`, limits known from the start,
which skip the slow start and pace the starts instead). The rows are bench_serve's made-up ones (about 12 rubric
items each), so 16 requests are about 200 grader calls and 64 about 800. Also printed, for a machine whose load
stretches every round: the server's CPU seconds a warm step (median), and the floor the machine allows now: the
step's grader calls sent straight to the fake, all at once from this process (median, in rounds), before each
warm step.

    .venv/bin/python benchmarks/bench_openrlhf.py [--latency 1,0.25] [--requests 16,64] [--steps 3] [--serve-args ARGS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from bench_rewards import one_round
from bench_serve import cpu_seconds, make_row, served

from healthbench.testing import GRADER_MARKER, FakeOpenAI

KEY = "sk-bench-openrlhf"
TOKEN = "bench-openrlhf-token-0123456789"
PROMPT = "<|im_start|>user\nA question.<|im_end|>\n<|im_start|>assistant\n"


def reply(step: int, index: int) -> str:
    return f"Rest, fluids, and see a doctor if it lasts more than three days. (step {step}, rollout {index})"


async def step(url: str, rows: list[dict[str, Any]], number: int) -> tuple[float, list[float]]:
    """One step: a request per row, all at once, each on a session of its own as OpenRLHF sends them; its seconds
    and the rewards in row order."""
    target = url.replace("http://", f"http://trainer:{TOKEN}@") + "/openrlhf"

    async def one(index: int, row: dict[str, Any]) -> float:
        body = {
            "query": [PROMPT + reply(number, index) + "<|im_end|>"],
            "prompts": [PROMPT],
            "labels": [row["prompt_id"]],
        }
        async with aiohttp.ClientSession() as http, http.post(target, json=body) as response:
            answer = await response.json()
            if response.status != 200:
                raise SystemExit(f"the server answered {response.status}: {answer}")
            return float(answer["rewards"][0])

    started = time.perf_counter()
    rewards = await asyncio.gather(*(one(index, row) for index, row in enumerate(rows)))
    return time.perf_counter() - started, list(rewards)


async def burst(grader_url: str, calls: int) -> float:
    """Seconds for `calls` grader requests sent straight to the fake at once: what no reward server can beat."""
    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": f"{GRADER_MARKER} [5] Says hello"}]}

    async def one(http: aiohttp.ClientSession) -> None:
        async with http.post(f"{grader_url}/chat/completions", json=body) as response:
            await response.read()

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(one(http) for _ in range(calls)))
        return time.perf_counter() - started


def graded(folder: Path, data: Path, rows: list[dict[str, Any]], number: int, grader_url: str) -> list[float]:
    """`healthbench grade`'s scores for step `number`'s replies, in row order."""
    responses = folder / f"responses-{number}.jsonl"
    lines = [json.dumps({"prompt_id": row["prompt_id"], "response": reply(number, i)}) for i, row in enumerate(rows)]
    responses.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = folder / f"grade-{number}-{time.monotonic_ns()}"
    command = [sys.executable, "-m", "healthbench", "grade", "--data", str(data), "--responses", str(responses)]
    command += ["--out", str(out), "--grader-base-url", grader_url, "--concurrency", "1024", "--no-progress"]
    env = {**os.environ, "HEALTHBENCH_GRADER_API_KEY": KEY}
    subprocess.run(command, env=env, check=True, capture_output=True)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    scores = {record["prompt_id"]: record["score"] for record in records}
    return [scores[row["prompt_id"]] for row in rows]


def main() -> None:
    """Run each row and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", default="1,0.25", help="seconds the fake grader takes, comma-separated")
    parser.add_argument("--requests", default="16,64", help="one-sample requests a step, comma-separated")
    parser.add_argument("--steps", type=int, default=3, help="steps after the first, for the median")
    parser.add_argument("--serve-args", default="", help="more flags for serve, e.g. '--concurrency 1024'")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each row as it is measured
    folder = Path(tempfile.mkdtemp(prefix="bench-openrlhf-"))
    tokens = folder / "tokens"
    tokens.write_text(TOKEN + "\n", encoding="utf-8")
    counts = [int(count) for count in args.requests.split(",")]
    rng = random.Random(0)
    rows = [make_row(rng, i) for i in range(max(counts))]
    data = folder / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(
        "one-sample requests at once to /openrlhf, as OpenRLHF sends a step; serve's defaults"
        f"{' and ' + args.serve_args if args.serve_args else ''}\n"
    )
    print(
        "| grader latency | requests | grader calls | first step | next steps, median | the calls straight to the "
        "fake, median | server CPU a warm step | rewards = grade's |"
    )
    print("|---|---|---|---|---|---|---|---|")
    flags = ["--auth-token-file", str(tokens), *shlex.split(args.serve_args)]
    for latency in (float(value) for value in args.latency.split(",")):
        for count in counts:
            chosen = rows[:count]
            calls = sum(len(row["rubrics"]) for row in chosen)
            with FakeOpenAI(latency=latency, record=False) as fake:
                assert fake.base_url
                round_trip = asyncio.run(one_round(fake.base_url))
                env = {"HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_PACE_STORE": None}
                with served(data, fake.base_url, None, env, flags) as (url, pid):
                    times, cpu, floor = [], [], []
                    for number in range(args.steps + 1):
                        if number:
                            floor.append(asyncio.run(burst(fake.base_url, calls)) / round_trip)
                        before = cpu_seconds(pid)
                        took, rewards = asyncio.run(step(url, chosen, number))
                        times.append(took / round_trip)
                        cpu.append(cpu_seconds(pid) - before)
                expected = graded(folder, data, chosen, args.steps, fake.base_url)
            same = all(abs(a - b) <= 1e-9 for a, b in zip(rewards, expected, strict=True))
            print(
                f"| {latency:g} s (round {round_trip:.2f} s) | {count} | {calls} | {times[0]:.2f} rounds | "
                f"{statistics.median(times[1:]):.2f} rounds | {statistics.median(floor):.2f} rounds | "
                f"{statistics.median(cpu[1:]):.2f} s | "
                f"{'yes' if same else 'NO'} |"
            )


if __name__ == "__main__":
    main()
