"""Measure a judge pool behind a real sglang-router: where `grade`'s calls go, and how soon they are done.

N fake judges (each answering in --latency seconds, in threads of this process, made as tests/judgerouter.py makes
them) behind sglang-router (scripts/dev installs it in .venv), and `healthbench grade` of the 500 sample rows (or
--rows N made-up ones where the sample is absent) with `--grader-base-url` at the router and `--concurrency C`, once
for each routing setting given (`cache_aware:0.3`: a policy, and for cache_aware its --cache-threshold). A line per
setting: wall time against the floor (calls x latency / concurrency), the share of calls whose conversation their
judge had been sent before (a prefix hit: what a vLLM judge's prefix cache reuses), the replies whose items all went
to one judge, each judge's calls, and whether the metrics equal one judge's. With --kill-after K, judge 0 stops once
it has been sent K calls (its port closes; the calls it holds then are answered within the fake's 2 s shutdown):
then the requests the judges were sent, against the calls.

    .venv/bin/python benchmarks/bench_router.py [--judges 4] [--latency 0.5] [--concurrency 512] \
        [--settings cache_aware:0.3 cache_aware:0.1 round_robin] [--kill-after 1500]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healthbench.testing import FakeOpenAI
from tests.judgerouter import judge, sglang_router
from tests.test_probe import made_up_rows

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "healthbench_sample.jsonl"
REPLY = "I am not a doctor, but please seek care if this gets worse."
# What each setting adds to the router's command line: a judge that stops answering is out after one failed health
# check a second or three failed calls (docs/deploy.md).
HEALTH = ("--health-check-interval-secs", "1", "--health-failure-threshold", "1", "--cb-failure-threshold", "3")
ENV = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "HEALTHBENCH_GRADER_API_KEY")}


def inputs(folder: Path, rows: int) -> tuple[Path, Path]:
    """The sample rows (or `rows` made-up ones where it is absent) and the same reply to each."""
    if SAMPLE.is_file():
        data = SAMPLE
        ids = [json.loads(line)["prompt_id"] for line in SAMPLE.read_text().split("\n") if line]
    else:
        made = made_up_rows(rows)
        data = folder / "rows.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in made))
        ids = [row["prompt_id"] for row in made]
    replies = folder / "replies.jsonl"
    replies.write_text("".join(json.dumps({"prompt_id": i, "response": REPLY}) + "\n" for i in ids))
    return data, replies


def grade(data: Path, replies: Path, out: Path, url: str, concurrency: int) -> float:
    """Run `healthbench grade` to the end; its wall seconds."""
    command = [
        sys.executable, "-m", "healthbench", "grade", "--data", str(data), "--responses", str(replies),
        "--out", str(out), "--grader-base-url", url, "--no-progress", "--concurrency", str(concurrency),
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, env=ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"grade failed:\n{done.stderr}")
    return time.monotonic() - started


def conversation(body: dict[str, object]) -> str:
    """The part of a grader prompt before its rubric item: the template's head and the conversation."""
    messages = body["messages"]
    assert isinstance(messages, list)
    return str(messages[-1]["content"]).rpartition("# Rubric item")[0]


def stop_after(server: FakeOpenAI, calls: int, done: threading.Event) -> None:
    """Stop `server` once it has been sent `calls` calls, or when `done` is set."""
    while server.requests_total < calls and not done.wait(0.01):
        pass
    server.stop()


def measure(setting: str, args: argparse.Namespace, data: Path, replies: Path, folder: Path, reference: bytes) -> str:
    """Grade through a router of `setting` in front of fresh judges; the line of figures to print."""
    policy, _, threshold = setting.partition(":")
    flags = ["--policy", policy, *(["--cache-threshold", threshold] if threshold else []), *HEALTH]
    judges = [judge(args.latency) for _ in range(args.judges)]
    for server in judges:
        server.start()
    done = threading.Event()
    killer = threading.Thread(target=stop_after, args=(judges[0], args.kill_after, done))
    out = folder / setting.replace(":", "-")
    try:
        with sglang_router(judges, folder / f"{out.name}.log", *flags) as router:
            if args.kill_after:
                killer.start()
            wall = grade(data, replies, out, router.base_url, args.concurrency)
    finally:
        done.set()
        if killer.is_alive():
            killer.join()
        for server in judges:
            server.stop()
    sent = [[conversation(body) for body in server.bodies] for server in judges]
    calls = sum(json.loads(line)["usage"]["calls"] for line in (out / "results.jsonl").read_text().split("\n") if line)
    hits = sum(len(bodies) - len(set(bodies)) for bodies in sent)
    where: defaultdict[str, set[int]] = defaultdict(set)
    for index, bodies in enumerate(sent):
        for text in bodies:
            where[text].add(index)
    together = sum(len(servers) == 1 for servers in where.values())
    floor = calls * args.latency / args.concurrency
    same = (out / "metrics.json").read_bytes() == reference
    requests = sum(server.requests_total for server in judges)
    return (
        f"{setting:>16}: {wall:5.1f} s ({wall / floor:.2f}x the floor of {floor:.1f} s), prefix hits "
        f"{hits / requests:.1%}, replies on one judge {together}/{len(where)}, calls by judge "
        f"{[server.requests_total for server in judges]}, {requests} requests for {calls} calls, "
        f"metrics {'equal to' if same else 'DIFFERENT from'} one judge's"
    )


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judges", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds each judge takes to answer")
    parser.add_argument("--concurrency", type=int, default=512, help="grade's --concurrency")
    parser.add_argument("--rows", type=int, default=500, help="made-up rows where the sample is absent")
    parser.add_argument("--settings", nargs="+", default=["cache_aware:0.3", "cache_aware:0.1", "round_robin"])
    parser.add_argument("--kill-after", type=int, default=0, help="stop judge 0 once it has been sent this many")
    args = parser.parse_args()
    # The router's first probe of each judge tries gRPC too, which the fake logs as a bad request with its traceback.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data, replies = inputs(folder, args.rows)
        with FakeOpenAI() as alone:
            assert alone.base_url
            grade(data, replies, folder / "alone", alone.base_url, 64)
        reference = (folder / "alone" / "metrics.json").read_bytes()
        print(
            f"{args.judges} judges at {args.latency} s, grade --concurrency {args.concurrency}"
            + (f", judge 0 stopped after {args.kill_after} calls" if args.kill_after else ""),
            flush=True,
        )
        for setting in args.settings:
            print(measure(setting, args, data, replies, folder, reference), flush=True)


if __name__ == "__main__":
    main()
