"""`healthbench eval` against OpenAI-style rate limiters: how much of the limit a run reaches, how much is refused.

Prints, section by section (`--sections`, all but `tier5` by default):

- `matrix`: the table of issue 29 (limiter x requests or tokens per minute x x-ratelimit headers or none x refused
  requests counted or not), each limit enforced over a one-second window; the default limiter forgives a debt past
  one window and gives exact retry hints, the hard one (`RateLimits.hard`) counts every refusal into a debt
  without bound and gives hints worked out before the refusal is counted, one request short: the share of the
  binding limit the whole command reached and the share of requests answered 429 (`--refusal-latency`: the
  limiter's 429s come back that much later; `--windows 1,10,60`, `--hints ms,seconds,message`, `--window-kind`
  and `--rows SUBSTRING` run issue 38's variants of each row chosen: burst windows, retry hints in milliseconds,
  in whole seconds only or in the message only; the share is then also given against what a large window's
  bucket adds: answered / (rate x wall + bucket)); then issue 47's rows, the plainest limiter (`RateLimits.plain`:
  a one-second bucket, exact hints, no headers, RPM) with refused requests counted or not; `--grader-key` gives the
  grader a key of its own, which the limiter counts with the policy's as an organization's keys share its limits;
- `noise`: no limit, but 4% of requests answered by a limitless 429 (`Retry-After: 1`, nothing else), against the
  same run without them;
- `faults`: `grade` on `--grade-tasks` tasks with 25% of requests faulted (500s, 503s, dropped connections, broken
  and empty bodies, limitless 429s), against a fault-free run;
- `quota`: a quota that runs out partway, and the same command run again with quota;
- `tier5`: a whole run at OpenAI's usage tier 5 (10,000 RPM and 30M TPM, refused requests counted, headers; the
  hard limiter unless `--tier5-limiter default`),
  `--tier5-tasks` made-up tasks at 1 +/- 0.5 s a request, default settings: the wall time against the limit's
  floor (its requests and tokens at the limits), the requests refused, the most in flight.

Every run's metrics.json is compared with a run against an unlimited endpoint. The fake endpoint runs in this
process, on a thread of its own; each command runs in a process of its own, with default settings, policy and
grader on the one endpoint and key. The tasks are the first `--tasks` of the sample as `--limit` picks them
(made-up rows where the sample is absent), 300 +/- 100 ms latency, a limit of 100 requests a second or the same
in tokens.

    .venv/bin/python benchmarks/bench_ratelimit.py [--tasks 200] [--rate 100] [--sections matrix,noise,...]
        [--refusal-latency 0.0] [--windows 1,10,60] [--hints ms,seconds,message] [--window-kind log] [--rows TEXT]
        [--grader-key sk-other]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
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
    answered: int  # admitted by the limiter, faults injected after it included
    answered_tokens: int
    refused: int
    quota_refused: int
    faults: int
    max_in_flight: int
    metrics: bytes | None
    stderr: str


@dataclass(frozen=True)
class Endpoint:
    """How the fake answers: its limiter, faults and latency."""

    limits: RateLimits
    latency: float
    jitter: float
    fault_rate: float = 0.0
    faults: tuple[str, ...] = ()


def run(
    command: list[str], out: Path, endpoint: Endpoint, timeout: float = TIMEOUT, grader_key: str = "sk-bench"
) -> Outcome:
    """One healthbench command (`eval ...`, `grade ...`) in a process of its own against a fake as `endpoint` says;
    the fake's URL and `out` are added to the command; the grader sends `grader_key` (the policy "sk-bench")."""
    with FakeOpenAI(
        limits=endpoint.limits,
        latency=endpoint.latency,
        latency_jitter=endpoint.jitter,
        fault_rate=endpoint.fault_rate,
        faults=endpoint.faults,
        fault_retry_after=1.0,
        record=False,
    ) as server:
        assert server.base_url
        urls = ["--grader-base-url", server.base_url]
        if command[0] == "eval":
            urls += ["--base-url", server.base_url]
        full = [sys.executable, "-m", "healthbench", *command, *urls, "--out", str(out), "--no-progress"]
        started = time.perf_counter()
        try:
            done = subprocess.run(
                full,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "OPENAI_API_KEY": "sk-bench", "HEALTHBENCH_GRADER_API_KEY": grader_key},
            )
            code: int | None = done.returncode
            stderr = done.stderr
        except subprocess.TimeoutExpired as exc:
            code, stderr = None, str(exc.stderr or "")
        seconds = time.perf_counter() - started
        kinds = server.responses_by_kind
        metrics_path = out / "metrics.json"
        return Outcome(
            seconds,
            code,
            server.limiter.answered,
            server.limiter.answered_tokens,
            kinds["rate_limited"],
            kinds["quota_exhausted"],
            sum(kinds[kind] for kind in endpoint.faults),
            server.max_in_flight,
            metrics_path.read_bytes() if metrics_path.exists() else None,
            stderr,
        )


def eval_command(data: Path, tasks: int) -> list[str]:
    return ["eval", "--model", "fake-model", "--data", str(data), "--limit", str(tasks)]


def finished(got: Outcome) -> str:
    return "" if got.exit_code == 0 else f" (exit {got.exit_code}: {got.stderr.strip()[-300:]})"


def limits_for(
    limiter: str, rpm: float | None, tpm: float | None, headers: bool = True, counted: bool = True
) -> RateLimits:
    """The default limiter or the hard one (`RateLimits.hard`)."""
    if limiter == "hard":
        return RateLimits.hard(rpm, tpm, headers=headers, count_refused=counted)
    return RateLimits(rpm=rpm, tpm=tpm, headers=headers, count_refused=counted)


def limiters(rpm: float, tpm: float) -> dict[str, RateLimits]:
    """The matrix of issue 29: each limiter (the default, whose debt stops at a window and whose hints are exact;
    the hard one, OpenAI's at its least forgiving: debt without bound, hints one request short) x requests or
    tokens x x-ratelimit headers or none x refused requests counted or not; then issue 47's plainest limiter, refused
    requests counted or not."""
    kinds: dict[str, RateLimits] = {}
    for limiter in ("default", "hard"):
        for dimension in ("RPM", "TPM"):
            for headers in (True, False):
                for counted in (True, False):
                    name = (
                        f"{limiter}, {dimension}, {'headers' if headers else 'no headers'}, refused "
                        f"{'counted' if counted else 'not counted'}"
                    )
                    limit = (rpm, None) if dimension == "RPM" else (None, tpm)
                    kinds[name] = limits_for(limiter, limit[0], limit[1], headers=headers, counted=counted)
    for counted in (False, True):  # issue 47's
        kinds[f"plain, RPM, refused {'counted' if counted else 'not counted'}"] = RateLimits.plain(
            rpm, count_refused=counted
        )
    return kinds


def variants(args: argparse.Namespace, tpm: float) -> dict[str, RateLimits]:
    """The rows of the matrix `--rows` chooses, in each burst window and retry hint style asked for."""
    chosen: dict[str, RateLimits] = {}
    for kind, limits in limiters(args.rate * 60, tpm).items():
        if args.rows not in kind:
            continue
        for window in (float(w) for w in args.windows.split(",")):
            for hints in args.hints.split(","):
                if hints not in ("ms", "seconds", "message"):
                    raise SystemExit(f"--hints: {hints!r} is none of ms, seconds, message")
                name = kind
                if (window, hints, args.window_kind) != (1.0, "ms", "bucket"):
                    refill = "" if args.window_kind == "bucket" else f" ({args.window_kind})"
                    name += f", {window:g} s window{refill}, hints in {hints}"
                chosen[name] = replace(
                    limits,
                    refusal_latency=args.refusal_latency,
                    window=window,
                    hints=hints,
                    kind=args.window_kind,
                )
    return chosen


def matrix(args: argparse.Namespace, data: Path, work: Path, free: Outcome) -> None:
    """The share of the limit reached and the requests refused, for each kind of limiter."""
    tpm = args.rate * 60 * free.answered_tokens / free.answered
    print(
        "| limiter | share of the limit reached | counting the bucket | requests answered 429 | wall | metrics as "
        "unlimited |"
    )
    print("|---|---|---|---|---|---|")
    for number, (kind, limits) in enumerate(variants(args, tpm).items()):
        endpoint = Endpoint(limits, args.latency, args.jitter)
        got = run(eval_command(data, args.tasks), work / f"run{number}", endpoint, grader_key=args.grader_key)
        if limits.rpm is not None:
            spent, rate = float(got.answered), args.rate
        else:
            spent, rate = float(got.answered_tokens), tpm / 60
        share = spent / got.seconds / rate
        bucketed = spent / (got.seconds * rate + rate * limits.window)
        refused = got.refused / max(1, got.answered + got.refused)
        same = "yes" if got.metrics == free.metrics else "NO"
        print(
            f"| {kind} | {share:.0%}{finished(got)} | {bucketed:.0%} | {refused:.2%} | {got.seconds:.1f} s | {same} |"
        )


def noise(args: argparse.Namespace, data: Path, work: Path, free: Outcome) -> None:
    """No limit, and 4% of requests answered by a limitless 429."""
    endpoint = Endpoint(RateLimits(rpm=1e12), args.latency, args.jitter, fault_rate=0.04, faults=("429",))
    got = run(eval_command(data, args.tasks), work / "noise", endpoint)
    same = "yes" if got.metrics == free.metrics else "NO"
    print(
        f"\nno limit, 4% limitless 429s (Retry-After: 1): {got.faults} of {got.answered} requests "
        f"refused, {got.seconds:.1f} s against {free.seconds:.1f} s without them ({got.seconds / free.seconds:.2f}x)"
        f"{finished(got)}; metrics as unlimited: {same}"
    )


def faults(args: argparse.Namespace, work: Path) -> None:
    """`grade` with a quarter of requests faulted, against a fault-free run."""
    rows = SAMPLE if SAMPLE.is_file() else work / "grade-rows.jsonl"
    if not SAMPLE.is_file():
        rows.write_text("".join(json.dumps(row) + "\n" for row in made_up_rows(args.grade_tasks)))
    replies = work / "replies.jsonl"
    with rows.open(encoding="utf-8") as lines:
        ids = [json.loads(line)["prompt_id"] for line in lines if line.strip()][: args.grade_tasks]
    reply = "Rest, drink fluids, and see a doctor if the fever passes 39 C or lasts three days."
    replies.write_text("".join(json.dumps({"prompt_id": i, "response": reply}) + "\n" for i in ids))
    command = ["grade", "--data", str(rows), "--responses", str(replies)]
    clean = run(command, work / "grade-clean", Endpoint(RateLimits(rpm=1e12), args.latency, args.jitter))
    kinds = ("500", "503", "drop", "badjson", "empty", "429")
    faulted = Endpoint(RateLimits(rpm=1e12), args.latency, args.jitter, fault_rate=0.25, faults=kinds)
    got = run(command, work / "grade-faults", faulted)
    same = "yes" if got.metrics is not None and got.metrics == clean.metrics else "NO"
    print(
        f"\ngrade, {len(ids)} tasks, 25% of requests faulted ({', '.join(kinds)}; 429s limitless, Retry-After: 1): "
        f"{got.faults} faults in {got.answered} requests, {got.seconds:.1f} s against "
        f"{clean.seconds:.1f} s fault-free ({got.seconds / clean.seconds:.2f}x){finished(got)}; metrics identical: "
        f"{same}"
    )


def quota(args: argparse.Namespace, data: Path, work: Path, free: Outcome) -> None:
    """A quota that runs out partway, then the same command with quota."""
    stopped = run(eval_command(data, args.tasks), work / "quota", Endpoint(RateLimits(quota=args.quota), 0.3, 0.1))
    message = next((line for line in stopped.stderr.splitlines() if "no quota left" in line), "(no message)")
    resumed = run(eval_command(data, args.tasks), work / "quota", Endpoint(RateLimits(rpm=1e12), 0.3, 0.1))
    same = "yes" if resumed.metrics == free.metrics else "NO"
    print(
        f"\nthe account's quota runs out after {args.quota} requests: stopped after {stopped.seconds:.1f} s, exit "
        f"{stopped.exit_code}, {stopped.quota_refused} refused for quota; resumed with quota: exit "
        f"{resumed.exit_code}, {resumed.answered} requests asked again, {resumed.seconds:.1f} s; metrics as "
        f"unlimited: {same}\nquota message: {message}"
    )


def tier5(args: argparse.Namespace, work: Path) -> None:
    """A whole run at usage tier 5 with default settings: how close to the limit's floor."""
    data = work / "tier5.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in made_up_rows(args.tier5_tasks)))
    limits = limits_for(args.tier5_limiter, 10_000, 30_000_000)
    endpoint = Endpoint(limits, 1.0, 0.5)
    got = run(eval_command(data, args.tier5_tasks), work / "tier5", endpoint, timeout=3600)
    floor = max(got.answered / 10_000, got.answered_tokens / 30_000_000) * 60
    scored = sum(1 for _ in (work / "tier5" / "results.jsonl").open()) if got.exit_code == 0 else 0
    refused = got.refused / max(1, got.answered + got.refused)
    print(
        f"\ntier 5 (10,000 RPM, 30M TPM, {args.tier5_limiter} limiter, refused counted, headers), {args.tier5_tasks} "
        "tasks, 1 +/- 0.5 s, default "
        f"settings: {got.answered} requests, {got.answered_tokens / 1e6:.1f}M tokens, {got.seconds:.0f} s against "
        f"a floor of {floor:.0f} s ({got.seconds / floor:.0%}), {refused:.2%} refused, at most {got.max_in_flight} "
        f"in flight, {scored} tasks scored{finished(got)}"
    )


SECTIONS = ("matrix", "noise", "faults", "quota", "tier5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rate", type=float, default=100.0, help="the limit, in requests a second")
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--jitter", type=float, default=0.1)
    parser.add_argument("--refusal-latency", type=float, default=0.0, help="seconds before a limiter's 429 comes back")
    parser.add_argument("--windows", default="1", help="matrix: burst windows in seconds, comma-separated")
    parser.add_argument("--hints", default="ms", help="matrix: retry hint styles, of ms,seconds,message")
    parser.add_argument(
        "--window-kind", choices=("bucket", "fixed", "log"), default="bucket", help="matrix: how windows refill"
    )
    parser.add_argument("--rows", default="", help="matrix: only the rows whose name holds this")
    parser.add_argument(
        "--grader-key",
        default="sk-bench",
        help="matrix: the grader's key (the policy's is sk-bench; the limiter counts both together)",
    )
    parser.add_argument("--quota", type=int, default=600, help="answered requests before the quota runs out")
    parser.add_argument("--grade-tasks", type=int, default=500, help="tasks graded in the faults section")
    parser.add_argument("--tier5-tasks", type=int, default=5000)
    parser.add_argument("--tier5-limiter", choices=("default", "hard"), default="hard")
    parser.add_argument("--sections", default="matrix,noise,faults,quota", help=f"of {','.join(SECTIONS)}")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each row as it is measured
    sections = args.sections.split(",")
    work = Path(tempfile.mkdtemp(prefix="bench-ratelimit-"))
    if SAMPLE.is_file():
        data, source = SAMPLE, f"{args.tasks} tasks of the sample"
    else:
        data = work / "rows.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in made_up_rows(args.tasks)))
        source = f"{args.tasks} made-up tasks (no sample at {SAMPLE})"

    if {"matrix", "noise", "quota"} & set(sections):
        # Unlimited, but counted: the reference metrics, and what a request costs in tokens on average.
        free = run(
            eval_command(data, args.tasks), work / "free", Endpoint(RateLimits(rpm=1e12), args.latency, args.jitter)
        )
        assert free.exit_code == 0 and free.metrics is not None, free.stderr
        print(
            f"{source}, {args.latency * 1000:.0f} +/- {args.jitter * 1000:.0f} ms latency; unlimited: {free.answered} "
            f"requests in {free.seconds:.1f} s ({free.answered / free.seconds:.0f}/s), "
            f"{free.answered_tokens / free.answered:.0f} tokens a request as TPM counts them\n",
            flush=True,
        )
        for name, section in (("matrix", matrix), ("noise", noise), ("quota", quota)):
            if name in sections:
                section(args, data, work, free)
    if "faults" in sections:
        faults(args, work)
    if "tier5" in sections:
        tier5(args, work)


if __name__ == "__main__":
    main()
