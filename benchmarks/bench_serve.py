"""Benchmark the OpenReward server: start-up time and memory with 5,000 tasks, then graded sessions per second.

Three processes, as deployed: the server (`healthbench serve`),
the fake grader (`python -m healthbench.testing`), and this script as the SDK client running many sessions
at once. The rows are made here, in the official schema and about the size of real ones (~12 KB each).

    python benchmarks/bench_serve.py [--tasks 5000] [--sessions 640] [--at-once 64] [--latency 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

THEMES = ["emergency_referrals", "communication", "hedging", "complex_responses", "global_health", "context_seeking"]
AXES = ["accuracy", "completeness", "communication_quality", "context_awareness", "instruction_following"]
WORDS = ["patient", "pain", "fever", "dose", "doctor", "clinic", "rest", "urgent", "mild", "severe", "history"]


def text(rng: random.Random, chars: int) -> str:
    """Filler prose of about `chars` characters."""
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words).capitalize() + "."


def make_row(rng: random.Random, i: int) -> dict[str, Any]:
    """One row shaped like the full set's: 42% multi-turn, ~12 items, most rows with physician completions."""
    turns = 1 if rng.random() < 0.58 else rng.choice([3, 5, 7])
    prompt = [{"role": ("user", "assistant")[t % 2], "content": text(rng, 860 // turns)} for t in range(turns)]
    rubrics = []
    for _ in range(rng.randint(6, 18)):
        points = rng.choice([-8, -5, -2, 2, 4, 5, 6, 7, 8, 10])
        level = rng.choice(["example", "example", "cluster"])
        tags = [f"level:{level}", f"axis:{rng.choice(AXES)}"]
        rubrics.append({"criterion": text(rng, 250), "points": points, "tags": tags})
    rubrics.append({"criterion": text(rng, 250), "points": 5, "tags": ["level:example", "axis:accuracy"]})
    ideal = None
    if rng.random() < 0.87:
        ideal = {
            "ideal_completion": text(rng, 1500),
            "ideal_completions_group": "Group 2",
            "ideal_completions_ref_completions": [text(rng, 1200) for _ in range(4)],
        }
    return {
        "prompt": prompt,
        "prompt_id": f"bench-{i:05d}",
        "example_tags": [f"theme:{rng.choice(THEMES)}"],
        "rubrics": rubrics,
        "ideal_completions_data": ideal,
        "canary": "benchmark rows, not HealthBench data",
    }


def http(url: str, body: dict[str, Any] | None = None) -> bytes:
    """GET, or POST `body` as JSON; raises on failure."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())


def wait_until_answered(url: str, body: dict[str, Any] | None, started: float, process: subprocess.Popen[str]) -> float:
    """Seconds from `started` until `url` answers 200."""
    while True:
        try:
            http(url, body)
            return time.perf_counter() - started
        except (urllib.error.URLError, ConnectionError):
            if process.poll() is not None:
                raise SystemExit(f"server exited with {process.returncode}") from None
            time.sleep(0.01)


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(
    data: Path, grader_url: str, src: Path | None, env: Mapping[str, str | None], args: Sequence[str] = ()
) -> Iterator[tuple[str, int]]:
    """`healthbench serve --data DATA [ARGS]` on a free loopback port (from `src` if given), grading at
    `grader_url`, with `env` over this process's environment (None: unset) and its output in serve.log beside the
    data; its URL and process id once `/health` answers."""
    given = {**os.environ, "OPENREWARD_DISABLE_UPDATE_CHECK": "1", "HEALTHBENCH_GRADER_BASE_URL": grader_url, **env}
    environment = {name: value for name, value in given.items() if value is not None}
    if src is not None:
        environment["PYTHONPATH"] = str(src.resolve())
    port = free_port()
    command = [sys.executable, "-m", "healthbench", "serve", "--data", str(data), "--host", "127.0.0.1"]
    log = (data.parent / "serve.log").open("a")
    process = subprocess.Popen([*command, f"--port={port}", *args], env=environment, stdout=log, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answered(url + "/health", None, time.perf_counter(), process)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait()
        log.close()


def rss_mb(pid: int) -> tuple[float, float]:
    """(resident, peak resident) in MB, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_command(data: Path, port: int, concurrency: int) -> list[str]:
    """`healthbench serve` on the made-up rows."""
    return [sys.executable, "-m", "healthbench", "serve", "--data", str(data), "--host", "127.0.0.1",
            f"--port={port}", f"--concurrency={concurrency}"]  # fmt: skip


async def run_sessions(base_url: str, sessions: int, at_once: int, tasks: int) -> tuple[float, list[float]]:
    """Graded sessions through the SDK client; returns the wall time and the rewards."""
    from openreward import AsyncOpenReward

    client = AsyncOpenReward(api_key="bench")
    env = client.environments.get("healthbench", base_url=base_url)
    gate = asyncio.Semaphore(at_once)

    async def one(i: int) -> float:
        secrets = {"OPENAI_API_KEY": "sk-bench"}
        async with gate, env.session(split="test", index=i * 7919 % tasks, secrets=secrets) as session:
            await session.get_prompt()
            output = await session.call_terminal_tool(f"Benchmark reply {i}.")
            return float(output.reward)

    try:
        started = time.perf_counter()
        rewards = await asyncio.gather(*(one(i) for i in range(sessions)))
        return time.perf_counter() - started, list(rewards)
    finally:
        await client.environments.aclose()


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--sessions", type=int, default=640, help="graded sessions to run")
    parser.add_argument("--at-once", type=int, default=64, help="sessions in flight at once")
    parser.add_argument("--grader-concurrency", type=int, default=64, help="the server's grader call budget")
    parser.add_argument("--latency", type=float, default=0.0, help="fake grader seconds per call")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()

    env = dict(os.environ, OPENREWARD_DISABLE_UPDATE_CHECK="1")
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "rows.jsonl"
        rng = random.Random(0)
        data.write_text("".join(json.dumps(make_row(rng, i)) + "\n" for i in range(args.tasks)), encoding="utf-8")
        data_mb = data.stat().st_size / 1e6
        fake_cmd = [sys.executable, "-m", "healthbench.testing", "--port", "0", "--latency", str(args.latency)]
        fake = subprocess.Popen(fake_cmd, stdout=subprocess.PIPE, text=True, env=env)
        assert fake.stdout is not None
        env["HEALTHBENCH_GRADER_BASE_URL"] = fake.stdout.readline().strip()
        base_url = f"http://127.0.0.1:{args.port}"
        command = server_command(data, args.port, args.grader_concurrency)
        started = time.perf_counter()
        server = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            health = wait_until_answered(base_url + "/health", None, started, server)
            counted = wait_until_answered(base_url + "/healthbench/num_tasks", {"split": "test"}, started, server)
            rss_start, _ = rss_mb(server.pid)
            listed_at = time.perf_counter()
            listing = http(base_url + "/healthbench/tasks", {"split": "test"})
            listing_seconds = time.perf_counter() - listed_at
            assert len(json.loads(listing)["tasks"]) == args.tasks
            cpu_before = cpu_seconds(server.pid), cpu_seconds(fake.pid), time.process_time()
            wall, rewards = asyncio.run(run_sessions(base_url, args.sessions, args.at_once, args.tasks))
            cpu_after = cpu_seconds(server.pid), cpu_seconds(fake.pid), time.process_time()
            rss_end, rss_peak = rss_mb(server.pid)
        finally:
            server.terminate()
            fake.terminate()
            server.wait()
            fake.wait()
    figures = {
        "tasks": args.tasks,
        "data_mb": round(data_mb, 1),
        "health_answered_s": round(health, 2),
        "num_tasks_answered_s": round(counted, 2),
        "rss_after_start_mb": round(rss_start, 1),
        "task_listing_kb": round(len(listing) / 1024, 1),
        "task_listing_s": round(listing_seconds, 3),
        "sessions": args.sessions,
        "sessions_at_once": args.at_once,
        "grader_latency_s": args.latency,
        "graded_sessions_per_s": round(args.sessions / wall, 1),
        "mean_reward": round(sum(rewards) / len(rewards), 4),
        # Where the time goes, per session: CPU milliseconds of the server, the fake grader and the SDK client.
        "cpu_ms_per_session": {
            name: round((after - before) * 1000 / args.sessions, 1)
            for name, before, after in zip(("server", "grader", "client"), cpu_before, cpu_after, strict=True)
        },
        "rss_after_sessions_mb": round(rss_end, 1),
        "rss_peak_mb": round(rss_peak, 1),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
