"""Where the wall time of `healthbench grade` goes at a fixed grader latency: bench_grade's run (the 500 sample
rows, 5,965 grader calls, the reference's grader), timed from the grader's side.

The fake grader runs in a thread of this process (`grade` in a process of its own, as a user runs it) and notes
when each request reaches its handler and when the handler returns. Printed for each run: the wall time and its
share of the bound (calls x latency / concurrency), the start-up (process launch to the first request), the slow
start (the first request to the first moment `--concurrency` calls are in the handler at once), the steady part's
mean number of calls in the handler (what it falls short of the concurrency is each call's time outside the
handler: its answer's way back, the client's work, the next request's way out), the handler's median time (entries
and exits paired in order), and the end (the last answer to the process's exit).

    .venv/bin/python benchmarks/bench_timeline.py [--runs 3] [--src <checkout>/src ...]

`--src` names one or more source trees to run `grade` from (PYTHONPATH), interleaved run by run: a before and
after on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from healthbench.testing import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
REPLY = "Please see a doctor if it gets worse."


class TimedFake(FakeOpenAI):
    """The fake grader, noting when each request enters and leaves its handler (perf_counter seconds)."""

    def __init__(self, latency: float) -> None:
        super().__init__(latency=latency)
        self.entered: list[float] = []
        self.left: list[float] = []

    async def _handle(self, request: web.Request) -> web.Response:
        self.entered.append(time.perf_counter())
        try:
            return await super()._handle(request)
        finally:
            self.left.append(time.perf_counter())


@dataclass
class Timeline:
    """One run's figures, in seconds from the process's launch unless said otherwise."""

    calls: int
    wall: float
    first_request: float
    full_at: float | None  # when `concurrency` calls were first in the handler at once
    last_answer: float
    steady_in_flight: float
    handler_median: float

    def summary(self, name: str, latency: float, concurrency: int) -> str:
        """The run's figures on one line."""
        bound = self.calls * latency / concurrency
        full = "never full" if self.full_at is None else f"full at {self.full_at - self.first_request:.2f} s"
        return (
            f"{name}: {self.calls} calls, wall {self.wall:.2f} s, {bound / self.wall:.1%} of the bound "
            f"({bound:.2f} s); first request at {self.first_request:.2f} s, {full} after it; "
            f"steady {self.steady_in_flight:.1f} of {concurrency} in the handler, handler median "
            f"{self.handler_median * 1000:.1f} ms; last answer to exit {self.wall - self.last_answer:.2f} s"
        )


def _timeline(fake: TimedFake, launched: float, ended: float, concurrency: int) -> Timeline:
    events = sorted([(at, 1) for at in fake.entered] + [(at, -1) for at in fake.left])
    first, last = fake.entered[0], max(fake.left)
    # The steady part: from when the slow start is surely over to a second before the end, when the last samples'
    # calls no longer fill the budget.
    level, full_at, area, before = 0, None, 0.0, first
    steady_from, steady_to = None, last - 1.0
    for at, step in events:
        if steady_from is not None and steady_from <= at <= steady_to:
            area += level * (at - max(before, steady_from))
        before = at
        level += step
        if full_at is None and level >= concurrency:
            full_at, steady_from = at, at
    steady = area / (steady_to - steady_from) if steady_from is not None and steady_to > steady_from else 0.0
    durations = [left - entered for entered, left in zip(sorted(fake.entered), sorted(fake.left), strict=True)]
    return Timeline(
        calls=len(fake.entered),
        wall=ended - launched,
        first_request=first - launched,
        full_at=None if full_at is None else full_at - launched,
        last_answer=last - launched,
        steady_in_flight=steady,
        handler_median=statistics.median(durations),
    )


def run_once(args: argparse.Namespace, responses: Path, src: str | None) -> Timeline:
    """One `grade` process against a fresh timed fake."""
    fake = TimedFake(args.latency)
    base_url = fake.start()
    env = {**os.environ, "HEALTHBENCH_GRADER_API_KEY": "sk-bench"}
    if src is not None:
        env["PYTHONPATH"] = src
    try:
        with tempfile.TemporaryDirectory(prefix="bench-timeline-") as out:
            launched = time.perf_counter()
            subprocess.run(
                [
                    *(sys.executable, "-m", "healthbench", "grade", "--data", str(args.data)),
                    *("--responses", str(responses), "--out", out, "--grader-base-url", base_url),
                    *("--concurrency", str(args.concurrency), "--no-progress"),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                env=env,
            )
            ended = time.perf_counter()
    finally:
        fake.stop()
    return _timeline(fake, launched, ended, args.concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "healthbench_sample.jsonl")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--src", nargs="+", default=[None], help="source trees to run grade from, interleaved")
    args = parser.parse_args()
    with args.data.open(encoding="utf-8", newline="\n") as rows:
        ids = [json.loads(row)["prompt_id"] for row in rows if row.strip()]
    with tempfile.TemporaryDirectory(prefix="bench-timeline-") as folder:
        responses = Path(folder) / "responses.jsonl"
        responses.write_text("".join(json.dumps({"prompt_id": i, "response": REPLY}) + "\n" for i in ids))
        for _ in range(args.runs):
            for src in args.src:
                timeline = run_once(args, responses, src)
                print(timeline.summary(src or "this checkout", args.latency, args.concurrency), flush=True)


if __name__ == "__main__":
    main()
