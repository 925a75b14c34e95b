"""`healthbench eval` against OpenAI-style rate limiters: how much of the limit a run reaches, how much is refused.

Prints the table of issue 12: for each kind of limiter (requests or tokens per minute enforced over a one-second
window, refused requests counted or not, x-ratelimit headers or none), the share of the binding limit the whole
command reached and the share of requests answered 429; then a quota that runs out partway, and the same
command run again with quota. Every run's metrics.json is compared with a run against an unlimited endpoint.

The fake endpoint runs in this process, on a thread of its own; each `healthbench eval` runs in a process of
its own, with default settings, policy and grader on the one endpoint and key. The tasks are the first
`--tasks` of the sample as `--limit` picks them (made-up rows where the sample is absent), 300 +/- 100 ms
latency, a limit of 100 requests a second or the same in tokens.

    .venv/bin/python benchmarks/bench_ratelimit.py [--tasks 200] [--rate 100] [--latency 0.3] [--jitter 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from healthbench.testing import FakeOpenAI
from healthbench.testing.limits import RateLimits

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = Path(os.environ.get("HEALTHBENCH_SAMPLE", ROOT.parent / "shared" / "data" / "healthbench_sample.jsonl"))
TIMEOUT = 300.0


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


@dataclass
class Outcome:
    seconds: float
    exit_code: int | None  # None: killed at the timeout
    answered: int
    answered_tokens: int
    refused: int
    quota_refused: int
    metrics: bytes | None
    stderr: str


def run_eval(data: Path, tasks: int, out: Path, limits: RateLimits, args: argparse.Namespace) -> Outcome:
    """One `healthbench eval` in a process of its own against a fake limited by `limits`."""
    with FakeOpenAI(limits=limits, latency=args.latency, latency_jitter=args.jitter, record=False) as server:
        assert server.base_url
        command = [
            sys.executable, "-m", "healthbench", "eval", "--model", "fake-model", "--base-url", server.base_url,
            "--grader-base-url", server.base_url, "--data", str(data), "--limit", str(tasks), "--out", str(out),
            "--no-progress",
        ]  # fmt: skip
        started = time.perf_counter()
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                env={**os.environ, "OPENAI_API_KEY": "sk-bench", "HEALTHBENCH_GRADER_API_KEY": "sk-bench"},
            )
            code: int | None = done.returncode
            stderr = done.stderr
        except subprocess.TimeoutExpired as exc:
            code, stderr = None, str(exc.stderr or "")
        seconds = time.perf_counter() - started
        limiter = server.limiter
        metrics_path = out / "metrics.json"
        return Outcome(
            seconds,
            code,
            limiter.answered,
            limiter.answered_tokens,
            server.responses_by_kind["rate_limited"],
            server.responses_by_kind["quota_exhausted"],
            metrics_path.read_bytes() if metrics_path.exists() else None,
            stderr,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rate", type=float, default=100.0, help="the limit, in requests a second")
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--jitter", type=float, default=0.1)
    parser.add_argument("--quota", type=int, default=600, help="answered requests before the quota runs out")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ratelimit-"))
    if SAMPLE.is_file():
        data, source = SAMPLE, f"{args.tasks} tasks of the sample"
    else:
        data = work / "rows.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in made_up_rows(args.tasks)))
        source = f"{args.tasks} made-up tasks (no sample at {SAMPLE})"

    # Unlimited, but counted: the reference metrics, and what a request costs in tokens on average.
    free = run_eval(data, args.tasks, work / "free", RateLimits(rpm=1e12), args)
    assert free.exit_code == 0 and free.metrics is not None, free.stderr
    tpm = args.rate * 60 * free.answered_tokens / free.answered
    rpm = args.rate * 60
    print(
        f"{source}, {args.latency * 1000:.0f} +/- {args.jitter * 1000:.0f} ms latency; unlimited: {free.answered} "
        f"requests in {free.seconds:.1f} s ({free.answered / free.seconds:.0f}/s), "
        f"{free.answered_tokens / free.answered:.0f} tokens a request as TPM counts them\n"
    )
    kinds = {
        "requests/s, refused not counted, no headers": RateLimits(rpm=rpm, count_refused=False, headers=False),
        "requests/s, refused counted, no headers": RateLimits(rpm=rpm, headers=False),
        "requests/s, refused counted, x-ratelimit headers": RateLimits(rpm=rpm),
        "tokens/min, refused counted, no headers": RateLimits(tpm=tpm, headers=False),
        "tokens/min, refused counted, x-ratelimit headers": RateLimits(tpm=tpm),
    }
    print("| limiter | share of the limit reached | requests answered 429 | wall | metrics as unlimited |")
    print("|---|---|---|---|---|")
    for number, (kind, limits) in enumerate(kinds.items()):
        got = run_eval(data, args.tasks, work / f"run{number}", limits, args)
        if limits.rpm is not None:
            share = got.answered / got.seconds / args.rate
        else:
            share = got.answered_tokens / got.seconds / (tpm / 60)
        finished = "" if got.exit_code == 0 else f" (exit {got.exit_code}: {got.stderr.strip()[-300:]})"
        refused = got.refused / max(1, got.answered + got.refused)
        same = "yes" if got.metrics == free.metrics else "NO"
        print(f"| {kind} | {share:.0%}{finished} | {refused:.2%} | {got.seconds:.1f} s | {same} |")

    quota = run_eval(data, args.tasks, work / "quota", RateLimits(quota=args.quota), args)
    message = next((line for line in quota.stderr.splitlines() if "no quota left" in line), "(no message)")
    resumed = run_eval(data, args.tasks, work / "quota", RateLimits(rpm=1e12), args)
    same = "yes" if resumed.metrics == free.metrics else "NO"
    print(
        f"| the account's quota runs out after {args.quota} requests | stopped after {quota.seconds:.1f} s, exit "
        f"{quota.exit_code} | {quota.quota_refused} refused for quota | resumed with quota: exit {resumed.exit_code}, "
        f"{resumed.answered} requests asked again, {resumed.seconds:.1f} s | {same} |"
    )
    print(f"\nquota message: {message}")


if __name__ == "__main__":
    main()
