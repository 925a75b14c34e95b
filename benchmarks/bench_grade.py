"""Time `healthbench grade` on the 500 sample rows against the fake grader, at zero and at fixed latency,
for the reference's grader (gpt-4.1 through Chat Completions) and gpt-5.4 at low effort through Chat
Completions and through the Responses API (the fake refuses what OpenAI refuses, so a wrong request fails).

Prints wall time, grader calls per second, CPU seconds per grader call (the grade process alone; the fake
server runs in its own process), and, with latency, the share of the ideal throughput reached
(concurrency / latency calls per second).

    .venv/bin/python benchmarks/bench_grade.py [--data ../shared/data/healthbench_sample.jsonl] [--graders ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_fake(latency: float, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """The fake server in a process of its own, so its CPU is not counted as the grader's (`flags`: more of its
    options); the process and the base URL it printed."""
    server = subprocess.Popen(
        [sys.executable, "-m", "healthbench.testing", "--port", "0", "--latency", str(latency), *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


GRADERS = {
    "gpt-4.1/chat": [],
    "gpt-5.4-low/chat": ["--grader-model", "gpt-5.4-2026-03-05", "--grader-reasoning-effort", "low"],
    "gpt-5.4-low/responses": [
        *("--grader-model", "gpt-5.4-2026-03-05", "--grader-reasoning-effort", "low"),
        *("--grader-api", "responses"),
    ],
}


def run_grade(
    data: Path, responses: Path, base_url: str, concurrency: int, grader: list[str]
) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and grader calls of one `healthbench grade` process."""
    out = Path(tempfile.mkdtemp(prefix="bench-grade-"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "healthbench",
            "grade",
            "--data",
            str(data),
            "--responses",
            str(responses),
            "--out",
            str(out),
            "--grader-base-url",
            base_url,
            "--concurrency",
            str(concurrency),
            "--no-progress",
            *grader,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "HEALTHBENCH_GRADER_API_KEY": "sk-bench"},
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    calls = json.loads((out / "usage.json").read_text())["this_session"]["grader"]["calls"]
    return wall, cpu, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "healthbench_sample.jsonl")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--graders", nargs="+", choices=list(GRADERS), default=list(GRADERS))
    args = parser.parse_args()
    responses = Path(tempfile.mkdtemp(prefix="bench-grade-")) / "responses.jsonl"
    with args.data.open(encoding="utf-8", newline="\n") as rows:
        ids = [json.loads(line)["prompt_id"] for line in rows if line.strip()]
    responses.write_text(
        "".join(json.dumps({"prompt_id": i, "response": "Please see a doctor if it gets worse."}) + "\n" for i in ids)
    )
    print(f"{len(ids)} tasks from {args.data}")
    request_bytes(args.data)
    for grader in args.graders:
        for latency in (0.0, args.latency):
            bench_one(args, responses, grader, latency)


def request_bytes(data: Path) -> None:
    """The grader's CPU per call for a request's bytes and its token count: each prompt encoded whole and parsed
    back (as before issue 29), and assembled from the conversation escaped once per reply (as now)."""
    from healthbench.api.ratesignals import request_cost
    from healthbench.data.loading import load_rows
    from healthbench.grading.grader import Grader
    from healthbench.grading.prompt import grader_prompt, render_conversation, rubric_item_text
    from healthbench.grading.prompt import transcript_with_reply as with_reply

    grader = Grader(client=None)  # type: ignore[arg-type]  # only its requests are made
    replies = [
        (render_conversation(with_reply(task.prompt, "Please see a doctor if it gets worse.")), task.rubrics)
        for task in load_rows(data)
    ]
    calls = sum(len(rubrics) for _, rubrics in replies)

    def whole() -> None:
        for conversation, rubrics in replies:
            for item in rubrics:
                _, sent = grader._encoded(grader_prompt(conversation, rubric_item_text(item)), "key")
                request_cost(json.loads(sent))

    def assembled() -> None:
        for conversation, rubrics in replies:
            payloads = grader._item_payloads(conversation)
            assert payloads is not None
            for item in rubrics:
                text = rubric_item_text(item)
                payloads(text)
                request_cost(grader.request_body(grader_prompt(conversation, text)))

    times = {}
    for name, work in (("whole", whole), ("assembled", assembled)):
        best = min(_timed(work) for _ in range(3))
        times[name] = best / calls * 1e6
    print(
        f"request bytes and token count, CPU per grader call: encoded whole and parsed back {times['whole']:.1f} us, "
        f"assembled from the conversation escaped once {times['assembled']:.1f} us",
        flush=True,
    )


def _timed(work: Callable[[], None]) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def bench_one(args: argparse.Namespace, responses: Path, grader: str, latency: float) -> None:
    """One `grade` run against a fresh fake, and its line of figures."""
    server, base_url = start_fake(latency)
    try:
        wall, cpu, calls = run_grade(args.data, responses, base_url, args.concurrency, GRADERS[grader])
    finally:
        server.terminate()
        server.wait()
    line = (
        f"{grader:22s} latency {latency * 1000:4.0f} ms  concurrency {args.concurrency}: wall {wall:6.2f} s, "
        f"{calls / wall:7.0f} calls/s, {cpu / calls * 1000:.3f} ms CPU per call (whole command)"
    )
    if latency:
        bound = args.concurrency / latency
        line += f", {calls / wall / bound:.1%} of the {bound:.0f} calls/s bound"
    print(line, flush=True)


if __name__ == "__main__":
    main()
