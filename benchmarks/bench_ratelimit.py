"""`healthbench eval` against an endpoint limited to N requests/s, policy and grader on that one endpoint.

Prints the share of the limit reached (successful requests per second of the whole command) and the share
of requests answered 429. The default is the issue's scenario: 100 requests/s, 300 ms latency, 200 tasks,
default settings.

    .venv/bin/python benchmarks/bench_ratelimit.py [--tasks 200] [--rate 100] [--latency 0.3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from healthbench.testing import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]


def made_up_rows(n: int) -> list[dict[str, object]]:
    """Rows in the official schema with twelve rubric items each, about a HealthBench median task."""
    return [
        {
            "prompt": [{"role": "user", "content": f"Question {i}: I have had a cough for two weeks."}],
            "prompt_id": f"bench-{i:05d}",
            "example_tags": ["theme:context_seeking"],
            "rubrics": [
                {"criterion": f"Criterion {k} of task {i}", "points": 5 if k % 3 else -4, "tags": ["axis:accuracy"]}
                for k in range(12)
            ],
        }
        for i in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--latency", type=float, default=0.3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ratelimit-"))
    data = work / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in made_up_rows(args.tasks)))
    with FakeOpenAI(rate_limit=args.rate, latency=args.latency, record=False) as server:
        assert server.base_url
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "healthbench", "eval", "--model", "fake-model", "--base-url", server.base_url,
             "--grader-base-url", server.base_url, "--data", str(data), "--out", str(work / "out"), "--no-progress"],
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "OPENAI_API_KEY": "sk-bench"},
        )  # fmt: skip
        wall = time.perf_counter() - started
        ok = server.responses_by_kind["ok"]
        limited = server.responses_by_kind["rate_limited"]
    print(
        f"{args.tasks} tasks, limit {args.rate:.0f}/s, latency {args.latency * 1000:.0f} ms: {ok} answered in "
        f"{wall:.1f} s = {ok / wall:.1f}/s ({ok / wall / args.rate:.1%} of the limit, whole command); "
        f"{limited} answered 429 ({limited / (ok + limited):.1%} of requests)"
    )


if __name__ == "__main__":
    main()
