"""The pace simulation's matrix (`tests/pacesim.py`: whole runs on a simulated clock, no start-up, no load).

Prints the share of the limit reached and the share of requests refused for issue 29's rows (the default and the
hard limiter x requests or tokens x headers or none x refused requests counted or not; share = answered / (rate
x wall)), then issue 38's variants of the row a held-out limiter found short (the hard limiter, RPM, no headers,
refusals counted, "Used" counting the refused request): burst windows of 1, 10 and 60 s x retry hints in
milliseconds, in whole seconds only, or in the message only x a window refilled continuously ("bucket"), emptied
at each multiple of the window ("fixed") or a sliding log ("log"), with 429s at once and with 429s 300 ms late and
requests reaching the limiter up to 50 ms late. The 60 s windows are at 20 requests a second, the others at 100.

Each variant prints the run's length in windows, two shares of what was answered, and the share refused:

- of rate x wall: answered / (the limit's rate x the wall time from the first start to the last answer), the
  share of the limit as the issue's bar reads it ("RPM over the run's minutes");
- of the most any client gets: answered / the most the limiter could have answered in that wall time. A bucket
  starts full and refills at the rate: rate x wall + one bucket (rate x window). A fixed window or a sliding log
  gives a budget B = rate x window per window and nothing on top of the rate: B x the windows the wall touches,
  floor(wall / window) + 1, counted from the limiter's start at 0 (a fixed window's are the multiples of the
  window from there; a log has no window-long stretch holding more than B, so its count is the same). The last
  window, partly used by a run that has run out of calls, counts whole: on a run a few windows long that alone
  puts the bound about 20% over rate x wall, so the fixed and log rows run at least `WINDOWS_RUN` windows (the
  buckets' and the 1 s windows' runs are as long as before: 2,000 calls plus two buckets).

A row is "below the bar" unless fewer than 5% of its requests were refused and its share of the limit is 85% or
more: of rate x wall for a fixed window or a sliding log, of rate x wall + bucket for a bucket (a bucket's
burst is the limiter's to give; a window's budget is its rate, once per window).

Then issue 47's rows: eval's shape (200 policy calls, 32 at once, each answer adding twelve grader calls, 64 at once)
against the plainest limiter (`RateLimits.plain`: 6,000 RPM in a one-second bucket, exact hints, no headers),
refused requests counted or not, with policy and grader on one key's gate or on a key each that the limiter counts
together (an organization's keys share its limits): siblings at one endpoint, as `keygates` makes them in one
process (`pacing.siblings` joins their paces once it sees them share the limit), or gates apart, each pace
knowing nothing of the other's (as two processes' keys of one organization: not issue 47's, shown for what a
sender this process cannot see costs), 429s at once or 300 ms late. Share = answered / (rate x wall), the measure
`eval`'s figures use (here without the process's start-up); the bar: 90% with under 3% refused where refusals are
not counted, 85% with under 5% where they are.

`--seeds N` runs each of issue 38's and issue 47's rows N times (another seed draws other latencies and
arrivals), prints the means and the lowest seed's share by the bar's measure and the highest share refused, and marks
a row below the bar if any seed is; `--rows TEXT` runs only issue 38's and 47's rows whose name holds TEXT (and not
issue 29's). A single run of a row can swing by a few points on one 429 more or less (a 429 at the pace keeps the
pace 4% lower for a few seconds).

    PYTHONPATH=src:. .venv/bin/python benchmarks/bench_pacesim.py [--seeds 1] [--rows TEXT]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healthbench.testing.limits import RateLimits, WindowKind
from tests.pacesim import COST, PLAIN_BAR, simulate

RATE = 100.0
WINDOWS = {1.0: RATE, 10.0: RATE, 60.0: 20.0}
KINDS: tuple[WindowKind, ...] = ("bucket", "fixed", "log")
WINDOWS_RUN = 20  # a fixed or sliding window's run is this many windows long at the rate, or longer
SEED = 7  # the simulation's seed, as the tests run it; --seeds N runs SEED .. SEED + N - 1
BAR, REFUSED = 0.85, 0.05  # issue 38's bar: this share of the limit or more, with under this share refused


def issue29() -> None:
    for limiter in ("default", "hard"):
        for dimension in ("RPM", "TPM"):
            for headers in (True, False):
                for counted in (True, False):
                    rpm, tpm = (RATE * 60, None) if dimension == "RPM" else (None, RATE * 60 * COST)
                    if limiter == "hard":
                        limits = RateLimits.hard(rpm, tpm, headers=headers, count_refused=counted)
                    else:
                        limits = RateLimits(rpm=rpm, tpm=tpm, headers=headers, count_refused=counted)
                    run = simulate(limits)
                    name = (
                        f"{limiter}, {dimension}, {'headers' if headers else 'no headers'}, refused "
                        f"{'counted' if counted else 'not counted'}"
                    )
                    print(f"| {name} | {run.answered / run.seconds / RATE:.1%} | {run.share_refused:.2%} |")


def bound(limits: RateLimits, rate: float, seconds: float) -> float:
    """The most any client could have had answered in `seconds` from the limiter's start (at 0): a bucket's rate
    over the wall plus the one bucket it starts with; a fixed window's or a sliding log's budget once for every
    window the wall touches (a fixed window's are the multiples of the window from 0; a log's no window-long
    stretch from 0 can hold more than its budget, so its count is the same)."""
    budget = max(1.0, rate * limits.window)
    if limits.kind == "bucket":
        return rate * seconds + budget
    return budget * (math.floor(seconds / limits.window) + 1)


def measure(limits: RateLimits, rate: float, late: bool, seed: int) -> tuple[float, float, float, float]:
    """One run of a variant: its length in windows, its share of rate x wall, of the most any client gets (the
    bar's for a bucket), and its share refused."""
    calls = int(2000 + 2 * rate * limits.window)
    if limits.kind != "bucket":
        calls = max(calls, int(rate * limits.window * WINDOWS_RUN))
    if late:
        run = simulate(limits, calls=calls, refusal_latency=0.3, arrival=0.05, seed=seed)
    else:
        run = simulate(limits, calls=calls, seed=seed)
    walled = run.answered / (rate * run.seconds)
    most = run.answered / bound(limits, rate, run.seconds)
    return run.seconds / limits.window, walled, most, run.share_refused


def issue38(seeds: int, rows: str) -> None:
    worst = " | lowest seed: the bar's share / highest refused" if seeds > 1 else ""
    print(f"\n| limiter | windows | of rate x wall | of the most any client gets | refused{worst} |")
    print("|---|---|---|---|---" + ("|---|" if seeds > 1 else "|"))
    for late in (False, True):
        for kind in KINDS:
            for window, rate in WINDOWS.items():
                for hints in ("ms", "seconds", "message"):
                    name = f"hard, {rate * 60:.0f} RPM, {window:g} s {kind}, hints in {hints}"
                    name += ", 429s 300 ms late, arrivals up to 50 ms late" if late else ""
                    if rows not in name:
                        continue
                    hard = RateLimits.hard(rpm=rate * 60, headers=False)
                    limits = replace(hard, window=window, hints=hints, used_counts_request=True, kind=kind)
                    runs = [measure(limits, rate, late, seed) for seed in range(SEED, SEED + seeds)]
                    # The bar's share: of rate x wall + bucket for a bucket, of rate x wall for a window's budget.
                    barred = [(most if kind == "bucket" else walled, refused) for _, walled, most, refused in runs]
                    low = min(barred)
                    short = "" if all(s >= BAR and r < REFUSED for s, r in barred) else " (below the bar)"
                    marks = (short, "") if kind != "bucket" else ("", short)
                    windows, walled, most, refused = (sum(column) / seeds for column in zip(*runs, strict=True))
                    print(
                        f"| {name} | {windows:.1f} | {walled:.1%}{marks[0]} | {most:.1%}{marks[1]} | {refused:.2%} |"
                        + (f" {low[0]:.1%} / {max(r for _, r in barred):.2%} |" if seeds > 1 else ""),
                        flush=True,
                    )


TASKS = 200  # eval's policy calls in issue 47's rows


# Issue 47's keys: one key's gate for policy and grader; a gate each, siblings at one endpoint (`pacing.siblings`); a
# gate each that cannot see the other (as two processes' gates: an organization's limit spent by a sender unseen).
KEYS = {
    "one key": (True, True),
    "a policy key and a grader key": (False, True),
    "a policy key and a grader key, gates apart": (False, False),
}


def issue47(seeds: int, rows: str) -> None:
    print("\n| limiter (eval's shape, 200 tasks) | of rate x wall | refused | lowest seed / highest refused |")
    print("|---|---|---|---|")
    for late in (False, True):
        for keys, (one_key, siblings) in KEYS.items():
            for counted in (False, True):
                name = f"plain, 6000 RPM, refused {'counted' if counted else 'not counted'}, {keys}"
                name += ", 429s 300 ms late" if late else ""
                if rows not in name:
                    continue
                limits = RateLimits.plain(RATE * 60, count_refused=counted)
                latency = 0.3 if late else 0.001
                runs = [
                    simulate(
                        limits,
                        calls=0,
                        policy=TASKS,
                        one_key=one_key,
                        siblings=siblings,
                        refusal_latency=latency,
                        seed=seed,
                    )
                    for seed in range(SEED, SEED + seeds)
                ]
                shares = [(run.answered / (RATE * run.seconds), run.share_refused) for run in runs]
                bar, most = PLAIN_BAR[counted]
                short = "" if all(s >= bar and r < most for s, r in shares) else " (below the bar)"
                share, refused = (sum(column) / seeds for column in zip(*shares, strict=True))
                print(
                    f"| {name} | {share:.1%}{short} | {refused:.2%} | {min(s for s, _ in shares):.1%} / "
                    f"{max(r for _, r in shares):.2%} |",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="issue 38's rows: runs of each, the mean printed")
    parser.add_argument("--rows", default="", help="issue 38's rows: only those whose name holds this")
    args = parser.parse_args()
    if not args.rows:
        print("| limiter | share of the limit | refused |\n|---|---|---|")
        issue29()
    issue38(max(1, args.seeds), args.rows)
    issue47(max(1, args.seeds), args.rows)


if __name__ == "__main__":
    main()
