"""Measure `healthbench grade --batch` on the 500 sample rows against the fake Batch API, beside live grading.

Prints, one figure a line: wall time and cost of a clean batch run against a live run and whether their
metrics.json are byte-identical; with failed and malformed lines injected, how many follow-up batches and lines
were needed and whether each failure was sent again exactly once; and after a SIGKILL while waiting, whether the
re-run re-attached, resent only the failures and still matched live; and under an enqueued-token limit, how
many batches were refused and sent again smaller.

    .venv/bin/python benchmarks/bench_batch.py [--data ../shared/data/healthbench_sample.jsonl] [--batch-delay 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from healthbench.testing import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300.0  # per subprocess: a hung run fails the benchmark instead of stalling it
ENV = {**os.environ, "HEALTHBENCH_GRADER_API_KEY": "sk-bench", "PYTHONUNBUFFERED": "1"}


def grade_command(data: Path, responses: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "healthbench", "grade", "--data", str(data), "--responses", str(responses),
        "--out", str(out), "--grader-base-url", base_url, "--no-progress", *extra,
    ]  # fmt: skip


def run_grade(command: list[str]) -> tuple[float, str]:
    """Wall seconds and stderr (where the batch status lines go) of one finished `healthbench grade`."""
    started = time.perf_counter()
    done = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV, timeout=TIMEOUT
    )
    wall = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"{' '.join(command[2:4])} exited {done.returncode}:\n{done.stderr}")
    return wall, done.stderr


def grader_usage(out: Path) -> tuple[int, float]:
    """Calls and cost_usd the run's usage.json reports for the grader over the whole run."""
    grader = json.loads((out / "usage.json").read_text())["whole_run"]["grader"]
    return int(grader["calls"]), float(grader["cost_usd"])


def same_metrics(a: Path, b: Path) -> bool:
    return (a / "metrics.json").read_bytes() == (b / "metrics.json").read_bytes()


def injected(server: FakeOpenAI) -> tuple[int, int]:
    """Error-file lines and malformed verdicts the fake handed out, over all its batches."""
    batches = server.batch_api.batches.values()
    return sum(not ok for b in batches for ok, _ in b.results), sum(b.malformed for b in batches)


def report_faults(server: FakeOpenAI, items: int, before: int | None = None) -> None:
    errors, malformed = injected(server)
    print(f"  batches created: {server.batches_created} (first + follow-ups)")
    if before is not None:
        print(f"  lines submitted before the kill: {before}")
    print(f"  lines submitted in total: {server.batch_lines_submitted}")
    print(f"  rubric items (one request each): {items}")
    print(f"  injected failures: {errors + malformed} ({errors} error lines + {malformed} malformed verdicts)")
    if before is None:
        ok = server.batch_lines_submitted == items + errors + malformed
        print(f"  lines submitted == items + failures: {ok}")
    else:
        ok = server.batch_lines_submitted == before + errors + malformed
        print(f"  total == before the kill + failures (only failures resent): {ok}")
    print(f"  live grader calls: {server.requests_total}")


def kill_while_waiting(command: list[str]) -> None:
    """Start the batch run and SIGKILL it once it is waiting on a batch it submitted."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    # Reading stdout blocks; the timer turns a run that never reaches the wait into EOF.
    guard = threading.Timer(TIMEOUT, process.kill)
    guard.start()
    seen = []
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(line)
        if "since submitted" in line:
            break
    guard.cancel()
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=TIMEOUT)
    process.stdout.close()
    if not any("since submitted" in line for line in seen):
        sys.exit("the batch run never reported waiting on a batch:\n" + "".join(seen))


def run_scenarios(work: Path, args: argparse.Namespace) -> None:
    responses = work / "responses.jsonl"
    with args.data.open(encoding="utf-8", newline="\n") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    ids = [row["prompt_id"] for row in rows]
    items = sum(len(row["rubrics"]) for row in rows)
    responses.write_text(
        "".join(json.dumps({"prompt_id": i, "response": f"Reply to {i}: rest and drink water."}) + "\n" for i in ids)
    )
    batch = ("--batch", "--poll-interval", str(args.poll_interval))
    print(f"{len(ids)} tasks from {args.data}; fake batch delay {args.batch_delay} s, poll {args.poll_interval} s")

    def faulty(delay: float) -> FakeOpenAI:
        rates = args.fail_rate, args.malformed_rate
        return FakeOpenAI(batch_delay=delay, batch_fail_rate=rates[0], batch_malformed_rate=rates[1], seed=args.seed)

    # One fake per scenario, so its counters and batches describe that run alone.
    with FakeOpenAI(record=False) as server:
        assert server.base_url
        live_wall, _ = run_grade(grade_command(args.data, responses, work / "live", server.base_url))
        live_calls = server.requests_total
    live_usage = grader_usage(work / "live")
    with FakeOpenAI(batch_delay=args.batch_delay) as server:
        assert server.base_url
        batch_wall, _ = run_grade(grade_command(args.data, responses, work / "batch", server.base_url, *batch))
        print("clean batch vs live:")
        print(f"  live wall: {live_wall:.2f} s ({live_calls} grader HTTP requests, usage.json calls {live_usage[0]})")
        print(f"  batch wall: {batch_wall:.2f} s")
        print(f"  metrics.json byte-identical: {same_metrics(work / 'live', work / 'batch')}")
        print(f"  live grader calls during the batch run: {server.requests_total}")
        print(f"  batches created: {server.batches_created}")
        print(f"  requests submitted: {server.batch_lines_submitted} for {items} rubric items")
        live_cost, batch_cost = live_usage[1], grader_usage(work / "batch")[1]
        print(f"  cost_usd live: {live_cost:.4f}, batch: {batch_cost:.4f} ({batch_cost / live_cost:.1%} of live)")

    with faulty(args.batch_delay) as server:
        assert server.base_url
        wall, _ = run_grade(grade_command(args.data, responses, work / "faults", server.base_url, *batch))
        print(f"faults (fail rate {args.fail_rate}, malformed rate {args.malformed_rate}, seed {args.seed}):")
        print(f"  wall: {wall:.2f} s")
        print(f"  metrics.json byte-identical to live: {same_metrics(work / 'live', work / 'faults')}")
        report_faults(server, items)

    with faulty(3600) as server:
        assert server.base_url
        server.batch_api.clock = lambda: 0.0  # the first batch stays 'validating' until the kill
        command = grade_command(args.data, responses, work / "killed", server.base_url, *batch)
        kill_while_waiting(command)
        before, batches_before = server.batch_lines_submitted, server.batches_created
        server.batch_api.clock = time.monotonic
        server.batch_delay = 0.1
        wall, stderr = run_grade(command)
        print("kill while waiting, then run again:")
        print(f"  batches created before the kill: {batches_before}")
        print(f"  re-run wall: {wall:.2f} s")
        attach = [line for line in stderr.splitlines() if "re-attaching" in line]
        print(f"  re-run said re-attaching: {bool(attach)} ({attach[0] if attach else 'no such line'})")
        print(f"  metrics.json byte-identical to live: {same_metrics(work / 'live', work / 'killed')}")
        report_faults(server, items, before)

    with FakeOpenAI(batch_delay=args.batch_delay, batch_token_limit=args.token_limit) as server:
        assert server.base_url
        wall, _ = run_grade(grade_command(args.data, responses, work / "limited", server.base_url, *batch))
        refused = [b for b in server.batch_api.batches.values() if b.errors]
        print(f"enqueued-token limit of {args.token_limit:,} (the sample's grading is about 7.7 million):")
        print(f"  wall: {wall:.2f} s")
        print(f"  metrics.json byte-identical to live: {same_metrics(work / 'live', work / 'limited')}")
        print(f"  batches created: {server.batches_created}, refused: {len(refused)}")
        print(
            f"  lines submitted: {server.batch_lines_submitted} = {items} items + "
            f"{sum(b.total for b in refused)} in refused batches"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "healthbench_sample.jsonl")
    parser.add_argument("--batch-delay", type=float, default=0.5, help="seconds the fake takes per batch")
    parser.add_argument("--poll-interval", type=float, default=0.05)
    parser.add_argument("--fail-rate", type=float, default=0.1, help="share of batch lines that fail")
    parser.add_argument("--malformed-rate", type=float, default=0.1, help="share of batch verdicts made unusable")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--token-limit", type=int, default=2_000_000, help="the fake's enqueued-token limit")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as work:
        run_scenarios(Path(work), args)
    print(f"whole benchmark: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
