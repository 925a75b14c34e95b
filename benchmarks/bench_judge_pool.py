"""Grade on a pool of self-hosted judges: `healthbench grade` of the 500 sample rows (5,965 grader calls; bench_grade's
fixed reply) or of a step of `--replies` replies, with one `--grader-base-url` per fake vLLM judge, each judge in a
process of its own serving `--capacity` requests at once in `--latency` seconds and queueing the rest (as vLLM's
`max_num_seqs`).

Printed: the wall time against the pool's floor (calls / (judges x capacity) x latency); each judge's share of the
requests; the share of the calls that hit a prefix their judge had already served (from the judges' /metrics: a
reply's items on one judge hit but for the first, about 92% of the sample's calls at best); the most requests in
each judge at once, and in the pool (the judges' running and waiting summed, read every `--poll` seconds: a lower
bound); and whether the metrics equal those of `grade` against one server (a fresh judge at no latency). With
`--kill-after CALLS`, the first judge is killed (SIGKILL) once the pool has answered about that many calls; then
also grade's exit status, the requests all judges received against the calls, the extra share, and grade's lines
that name the killed judge.

    .venv/bin/python benchmarks/bench_judge_pool.py --judges 4 --capacity 64 --latency 0.5
    .venv/bin/python benchmarks/bench_judge_pool.py --judges 3 --capacity 64 --latency 0.3 --kill-after 1500
    .venv/bin/python benchmarks/bench_judge_pool.py --judges 2 --capacity 64 --latency 1 --concurrency 1500
    .venv/bin/python benchmarks/bench_judge_pool.py --judges 4 --replies 4096        # a step of 512 prompts x 8

More than one judge needs `grade` to take `--grader-base-url` more than once (issue 43's pool); `--concurrency` is
then each judge's budget, as the pool takes it.

With `--router POLICY` (`cache_aware:0.1`: a policy, and for cache_aware its --cache-threshold), `grade` names one
URL instead, a real sglang-router's (`tests/judgerouter.py`; scripts/dev installs it in .venv) in front of the same
judges, with docs/deploy.md's health and circuit-breaker settings; `--concurrency` is then the router's one budget,
the pool's total by default (judges x capacity):

    .venv/bin/python benchmarks/bench_judge_pool.py --judges 4 --capacity 64 --latency 0.5 --router cache_aware:0.1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench_grade import ROOT, start_fake

# tests.judgerouter starts the router for --router: the repository's root on the path, as for bench_pacesim.
sys.path.insert(0, str(ROOT))

from tests.judgerouter import Router, sglang_router

REPLY = "Please see a doctor if it gets worse."
# The fake's /metrics names (healthbench.testing.judge).
REQUESTS = "healthbench_fake_requests_total"
HITS = "healthbench_fake_prefix_cache_hits_total"
PEAK = "healthbench_fake_peak_in_flight"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
QUERY_TOKENS = "vllm:prefix_cache_queries_total"
HIT_TOKENS = "vllm:prefix_cache_hits_total"
# The router's settings docs/deploy.md gives: a dead judge out after two failed health checks five seconds apart,
# or three failed calls.
ROUTER_HEALTH = ("--health-check-interval-secs", "5", "--health-failure-threshold", "2", "--cb-failure-threshold", "3")


@dataclass
class Judge:
    """One fake judge's process, its base URL, and its /metrics as last read."""

    process: subprocess.Popen[str]
    url: str
    last: dict[str, float] = field(default_factory=dict)
    killed: bool = False

    def read(self) -> None:
        """Read its /metrics now: each sample's value by name, the variants of a name's labels summed."""
        with urllib.request.urlopen(self.url.removesuffix("/v1") + "/metrics", timeout=10) as response:
            text = response.read().decode()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                sample, _, value = line.rpartition(" ")
                name = sample.split("{", 1)[0]
                values[name] = values.get(name, 0.0) + float(value)
        self.last = values

    @property
    def in_flight(self) -> float:
        return self.last.get(RUNNING, 0.0) + self.last.get(WAITING, 0.0)


class Watch:
    """Reads every live judge's /metrics every `every` seconds on a thread of its own while `grade` runs: the pool's
    peak in flight, and the kill of the first judge once the pool has answered `kill_after` calls."""

    def __init__(self, judges: list[Judge], every: float, kill_after: int | None) -> None:
        self.judges = judges
        self.every = every
        self.kill_after = kill_after
        self.peak = 0.0
        self.killed_after: float | None = None  # the calls the pool had answered when the judge was killed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.poll()

    def poll(self) -> None:
        """Read the live judges once; kill the first if its time has come."""
        for judge in self.judges:
            if not judge.killed:
                with contextlib.suppress(OSError):  # a judge too busy to answer in 10 s keeps its last reading
                    judge.read()
        self.peak = max(self.peak, sum(judge.in_flight for judge in self.judges if not judge.killed))
        answered = sum(judge.last.get(REQUESTS, 0.0) - judge.in_flight for judge in self.judges)
        if self.kill_after is not None and self.killed_after is None and answered >= self.kill_after:
            victim = self.judges[0]
            victim.process.send_signal(signal.SIGKILL)
            victim.killed = True
            self.killed_after = answered


@dataclass(frozen=True)
class Step:
    """What is graded: the rows and replies files, how many replies, and their grader calls."""

    data: Path
    responses: Path
    replies: int
    calls: int


def step(source: Path, replies: int | None, folder: Path) -> Step:
    """The rows and replies to grade, written in `folder`: every row of `source`, or a step
    of `replies` replies (its first rows; past its end, its rows again as further rollouts, each with a reply and a
    prompt_id of its own)."""
    with source.open(encoding="utf-8", newline="\n") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    chosen = []
    for n in range(len(rows) if replies is None else replies):
        row, rollout = rows[n % len(rows)], n // len(rows)
        if rollout:
            row = {**row, "prompt_id": f"{row['prompt_id']}-rollout{rollout}"}
        chosen.append((row, f"{REPLY} (Rollout {rollout}.)" if rollout else REPLY))
    data, responses = folder / "rows.jsonl", folder / "responses.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row, _ in chosen), encoding="utf-8")
    responses.write_text(
        "".join(json.dumps({"prompt_id": row["prompt_id"], "response": reply}) + "\n" for row, reply in chosen),
        encoding="utf-8",
    )
    return Step(data, responses, len(chosen), sum(len(row["rubrics"]) for row, _ in chosen))


def grade(
    graded: Step, out: Path, urls: list[str], concurrency: int | None, timeout: float
) -> tuple[float, int | None, str]:
    """One `healthbench grade` process against the judges at `urls`: its wall seconds, exit status (None: still
    running after `timeout` seconds, then killed) and stderr."""
    command = [
        *(sys.executable, "-m", "healthbench", "grade", "--data", str(graded.data)),
        *("--responses", str(graded.responses)),
        *("--out", str(out), "--no-progress"),
        *(flag for url in urls for flag in ("--grader-base-url", url)),
        *(() if concurrency is None else ("--concurrency", str(concurrency))),
    ]
    env = {**os.environ, "HEALTHBENCH_GRADER_API_KEY": "sk-bench"}
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr.decode() if isinstance(expired.stderr, bytes) else (expired.stderr or "")
        return time.perf_counter() - started, None, stderr
    return time.perf_counter() - started, done.returncode, done.stderr


def reference_metrics(graded: Step, folder: Path, timeout: float) -> dict[str, object]:
    """metrics.json of `grade` against one fresh judge at no latency and no capacity."""
    server, url = start_fake(0.0)
    try:
        _, status, stderr = grade(graded, folder / "one-server", [url], None, timeout)
    finally:
        server.terminate()
        server.wait()
    if status != 0:
        raise SystemExit(f"grade against one server ended with status {status}:\n{stderr}")
    metrics: dict[str, object] = json.loads((folder / "one-server" / "metrics.json").read_text())
    return metrics


def compared(pool: Path, reference: dict[str, object]) -> str:
    """Whether the pool run's metrics equal the reference's, and if not, where they part."""
    if not pool.is_file():
        return "no metrics.json (the run did not finish)"
    metrics = json.loads(pool.read_text())
    if metrics == reference:
        return f"equal ({len(metrics)} keys; overall_score {metrics.get('overall_score')})"
    differing = sorted(key for key in metrics.keys() | reference.keys() if metrics.get(key) != reference.get(key))
    return f"DIFFERENT at {len(differing)} keys, first {differing[:5]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "healthbench_sample.jsonl")
    parser.add_argument("--judges", type=int, default=4, help="fake judge processes")
    parser.add_argument("--capacity", type=int, default=64, help="requests each judge serves at once (--max-running)")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds each request is in service")
    parser.add_argument("--concurrency", type=int, help="grade's --concurrency [default: --capacity]")
    parser.add_argument("--replies", type=int, help="a step of this many replies [default: every row, one reply]")
    parser.add_argument("--kill-after", type=int, help="SIGKILL the first judge once the pool has answered so many")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between readings of the judges' /metrics")
    parser.add_argument(
        "--router",
        metavar="POLICY",
        help="grade through sglang-router in front of the judges with this policy (cache_aware:THRESHOLD for "
        "cache_aware at that --cache-threshold)",
    )
    args = parser.parse_args()
    # Through the router the pool has one budget, its total; named one by one, each judge has its own.
    budgets = args.judges if args.router else 1
    concurrency = args.capacity * budgets if args.concurrency is None else args.concurrency
    with tempfile.TemporaryDirectory(prefix="bench-judge-pool-") as name:
        folder = Path(name)
        graded = step(args.data, args.replies, folder)
        calls = graded.calls
        floor = calls / (args.judges * args.capacity) * args.latency
        timeout = 600 + 20 * floor
        print(
            f"{calls} grader calls ({'every row' if args.replies is None else f'a step of {args.replies} replies'} of "
            f"{args.data.name}); {args.judges} judges x {args.capacity} running at {args.latency * 1000:.0f} ms, "
            f"--concurrency {concurrency}"
            + (f" through sglang-router ({args.router})" if args.router else "")
            + f"; each grade bounded at {timeout:.0f} s",
            flush=True,
        )
        reference = reference_metrics(graded, folder, timeout)
        judges = [Judge(*start_fake(args.latency, "--max-running", str(args.capacity))) for _ in range(args.judges)]
        try:
            with contextlib.ExitStack() as stack:
                urls = [judge.url for judge in judges]
                if args.router:
                    urls = [stack.enter_context(routed(urls, args.router, folder)).base_url]
                watch = stack.enter_context(Watch(judges, args.poll, args.kill_after))
                wall, status, stderr = grade(graded, folder / "pool", urls, concurrency, timeout)
        finally:
            for judge in judges:
                judge.process.terminate()
                judge.process.wait()
        report(args, judges, watch, graded, floor, wall, status)
        if args.kill_after is not None:
            killed(judges[0], watch, calls, stderr)
        elif status != 0:
            print("grade's stderr, its last lines:\n" + "\n".join(stderr.splitlines()[-10:]))
        print(f"metrics against one server's: {compared(folder / 'pool' / 'metrics.json', reference)}", flush=True)


def routed(urls: list[str], setting: str, folder: Path) -> contextlib.AbstractContextManager[Router]:
    """sglang-router in front of the judges at `urls` with `setting`'s policy (and cache_aware's threshold)."""
    policy, _, threshold = setting.partition(":")
    flags = ["--policy", policy, *(["--cache-threshold", threshold] if threshold else []), *ROUTER_HEALTH]
    return sglang_router(urls, folder / "router.log", *flags, "--log-level", "warn")


def report(
    args: argparse.Namespace,
    judges: list[Judge],
    watch: Watch,
    graded: Step,
    floor: float,
    wall: float,
    status: int | None,
) -> None:
    """The run's figures: wall against the floor, the judges' shares, prefix hits, peaks."""
    calls = graded.calls
    ended = "did not finish" if status is None else f"exit status {status}"
    ratio = f"{wall / floor:.3f}" if floor else "-"
    print(
        f"wall {wall:.2f} s; floor {floor:.2f} s ({calls} calls / ({args.judges} x {args.capacity}) x "
        f"{args.latency:g} s); wall / floor {ratio}; {ended}"
    )
    received = sum(judge.last.get(REQUESTS, 0.0) for judge in judges)
    shares = ", ".join(
        f"{judge.last.get(REQUESTS, 0.0) / max(received, 1):.1%}" + (" (killed)" if judge.killed else "")
        for judge in judges
    )
    print(f"each judge's share of the {received:.0f} requests they received: {shares}")
    hits = sum(judge.last.get(HITS, 0.0) for judge in judges)
    queried = sum(judge.last.get(QUERY_TOKENS, 0.0) for judge in judges)
    cached = sum(judge.last.get(HIT_TOKENS, 0.0) for judge in judges)
    print(
        f"prefix hits: {hits:.0f} of {calls} calls ({hits / max(calls, 1):.1%}; the ideal is "
        f"{1 - graded.replies / max(calls, 1):.1%}); tokens read from the cache {cached / max(queried, 1):.1%}"
        " of those queried"
    )
    peaks = ", ".join(f"{judge.last.get(PEAK, 0.0):.0f}" for judge in judges)
    print(
        f"peak requests in flight: each judge {peaks}; the pool {watch.peak:.0f} (summed from readings every "
        f"{args.poll:g} s: a lower bound)"
    )


def killed(judge: Judge, watch: Watch, calls: int, stderr: str) -> None:
    """What the kill cost: when it came, the requests sent for the calls, and what grade said of the judge."""
    if watch.killed_after is None:
        print("no judge was killed: the pool never answered that many calls")
        return
    received = sum(j.last.get(REQUESTS, 0.0) for j in watch.judges)
    print(
        f"first judge killed (SIGKILL) after {watch.killed_after:.0f} calls answered by the pool; requests received by "
        f"all judges {received:.0f} (the killed one's as last read) for {calls} calls: "
        f"{(received - calls) / calls:+.1%} extra"
    )
    address = judge.url.removeprefix("http://").removesuffix("/v1")
    said = [line for line in stderr.splitlines() if address in line]
    print(f"grade's lines naming {address}: {len(said)}" + "".join(f"\n    {line}" for line in said[:5]), flush=True)


if __name__ == "__main__":
    main()
