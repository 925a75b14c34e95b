"""What a hostile or careless request costs `healthbench serve`: memory, time and grader calls.

Against the fake grader (on a thread of this process) and a server process of its own with a token, this prints one
row per request: the server's resident memory before and its peak after (VmHWM, a high-water mark), how long the
answer took, its HTTP status, the grader calls it made and the bytes it added to the server's log:

- a `/create` whose body is `--mb` MB, one alone and three at once;
- a session's `respond` whose reply is `--mb` MB, and one of 1 MB (each graded by a server without bounds);
- a `score_group` of `--candidates` candidates (about 12 rubric items a task: 12 grader calls each, unbounded);
- `--probes` requests without the token, and as many with it (the door's cost on a request it lets in).

`--src DIR` runs the server from another source tree, for instance a checkout of main before the bounds (there the
token is ignored and every request is let in), to compare.

    .venv/bin/python benchmarks/bench_access.py [--mb 50] [--candidates 1000] [--probes 200] [--src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
from bench_serve import make_row, served

from healthbench.testing import FakeOpenAI

KEY = "sk-bench-access"
TOKEN = "bench-access-token-0123456789"
AUTH = {"X-API-Key": TOKEN}


@contextmanager
def server(data: Path, grader_url: str, src: Path | None) -> Iterator[tuple[str, int]]:
    """`healthbench serve --data DATA` with a token and the server's own key, from `src` if given; its URL and
    process id."""
    # Unbuffered: a request's lines are in the log file by the time its answer has come.
    env = {"HEALTHBENCH_SERVER_TOKEN": TOKEN, "HEALTHBENCH_GRADER_API_KEY": KEY, "PYTHONUNBUFFERED": "1"}
    with served(data, grader_url, src, env) as found:
        yield found


def memory_mb(pid: int, field: str) -> float:
    """A process's resident memory (`VmRSS`) or its peak (`VmHWM`), in MB."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    found = re.search(rf"^{field}:\s+(\d+) kB", status, flags=re.MULTILINE)
    assert found, status
    return int(found.group(1)) / 1024


async def post(http: aiohttp.ClientSession, url: str, path: str, headers: dict[str, str], **body: Any) -> int:
    async with http.post(url + path, headers={**AUTH, **headers}, **body) as response:
        await response.read()
        return response.status


async def big_creates(url: str, mb: int, at_once: int) -> list[int]:
    """`at_once` `/create` requests at once, each a body of `mb` MB (a JSON task spec with one long string)."""
    body = b'{"task_spec": {"split": "test", "prompt_id": "' + b"x" * (mb * 1024 * 1024) + b'"}}'
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        calls = [post(http, url, "/create", {**headers, "X-Session-ID": f"big-{i}"}, data=body) for i in range(at_once)]
        return list(await asyncio.gather(*calls))


async def session_request(url: str, path: str, payload: dict[str, Any]) -> int:
    """Create a session of task 0, send `payload` to `path` on it, delete it; the status of the request (an SSE
    stream's error event counts as 400)."""
    sid = f"bench-{random.getrandbits(64):x}"
    headers = {"X-Session-ID": sid}
    async with aiohttp.ClientSession() as http:
        assert await post(http, url, "/create", headers, json={"split": "test", "index": 0}) == 200
        async with http.post(url + path, headers={**AUTH, **headers}, json=payload) as response:
            text = await response.text()
            status = 400 if response.status == 200 and "event: error" in text else response.status
        await post(http, url, "/delete", headers)
    return status


async def probes(url: str, count: int, headers: dict[str, str]) -> tuple[float, int]:
    """`count` GET `/healthbench/tools` one after another with `headers`: the median seconds, and the last status."""
    times = []
    status = 0
    async with aiohttp.ClientSession() as http:
        for _ in range(count):
            started = time.perf_counter()
            async with http.get(url + "/healthbench/tools", headers=headers) as response:
                await response.read()
                status = response.status
            times.append(time.perf_counter() - started)
    return statistics.median(times), status


def measured(label: str, pid: int, fake: FakeOpenAI, action: Any, log: Path) -> None:
    """Run `action` (a coroutine) and print its row."""
    fake.reset()
    written = log.stat().st_size
    before = memory_mb(pid, "VmRSS")
    started = time.perf_counter()
    statuses = asyncio.run(action)
    seconds = time.perf_counter() - started
    peak = memory_mb(pid, "VmHWM")
    said = ", ".join(str(s) for s in statuses) if isinstance(statuses, list) else str(statuses)
    logged = log.stat().st_size - written
    print(
        f"| {label} | {said} | {seconds:.2f} s | {before:.0f} MB | {peak:.0f} MB | {fake.requests_total:,} | "
        f"{logged:,} B |"
    )


def main() -> None:
    """Start the fake and the server, then measure each request and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=50, help="size of the large bodies and the large reply, in MB")
    parser.add_argument("--candidates", type=int, default=1000, help="candidates of the large score_group")
    parser.add_argument("--probes", type=int, default=200, help="requests without the token, and with it")
    parser.add_argument("--src", type=Path, help="run the server from this source tree (an earlier checkout)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each row as it is measured
    folder = Path(tempfile.mkdtemp(prefix="bench-access-"))
    data = folder / "rows.jsonl"
    rng = random.Random(0)
    rows = [make_row(rng, i) for i in range(4)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(f"server from {args.src or 'this tree'}; task 0 has {len(rows[0]['rubrics'])} rubric items\n")
    print("| request | status | time | resident before | peak after | grader calls | log written |")
    print("|---|---|---|---|---|---|---|")
    log = folder / "serve.log"
    with FakeOpenAI() as fake, server(data, fake.base_url or "", args.src) as (url, pid):
        measured(f"`/create`, {args.mb} MB body", pid, fake, big_creates(url, args.mb, 1), log)
        measured(f"3 x `/create`, {args.mb} MB each, at once", pid, fake, big_creates(url, args.mb, 3), log)
        for size, label in ((args.mb * 1024 * 1024, f"{args.mb} MB"), (1024 * 1024, "1 MB")):
            reply = {"name": "respond", "input": {"response": "y" * size}}
            measured(f"`respond`, a {label} reply", pid, fake, session_request(url, "/healthbench/call", reply), log)
        blocks = [[{"type": "text", "text": f"Reply {i}."}] for i in range(args.candidates)]
        candidates = {"candidates": [{"messages": [{"role": "assistant", "blocks": b}]} for b in blocks]}
        measured(
            f"`score_group`, {args.candidates:,} candidates", pid, fake,
            session_request(url, "/healthbench/score_group", candidates), log,
        )  # fmt: skip
        for label, headers in (("no token", {}), ("the token", AUTH)):
            median, status = asyncio.run(probes(url, args.probes, headers))
            row = f"| {args.probes} x `/healthbench/tools`, {label} | {status} | median {median * 1000:.2f} ms |"
            print(row + " | | | |")


if __name__ == "__main__":
    main()
