"""The pace simulation's matrix (`tests/pacesim.py`: whole runs on a simulated clock, no start-up, no load).

Prints the share of the limit reached and the share of requests refused for issue 29's rows (the default and the
hard limiter x requests or tokens x headers or none x refused requests counted or not; share = answered / (rate
x wall)), then issue 38's variants of the row a held-out limiter found short (the hard limiter, RPM, no headers,
refusals counted, "Used" counting the refused request): burst windows of 1, 10 and 60 s x retry hints in
milliseconds, in whole seconds only, or in the message only x a window refilled continuously ("bucket"), emptied
at each multiple of the window ("fixed") or a sliding log ("log"), with 429s at once and with 429s 300 ms late and
requests reaching the limiter up to 50 ms late; share = answered / (rate x wall + bucket), the bar's, and beside
it answered / (rate x wall), as `bench_ratelimit` gives both. The 60 s windows are at 20 requests a second, the
others at 100, so that every large window's bucket is about a thousand requests. A fixed or sliding window gives
its bucket once a window, not on top of the rate: a pace at the rate reaches about rate x wall, and the bucket's
share only by spending each window's budget at its start (for the 10 s windows, whose runs are four buckets
long, every last request of it).

    PYTHONPATH=src:. .venv/bin/python benchmarks/bench_pacesim.py
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healthbench.testing.limits import RateLimits, WindowKind
from tests.pacesim import COST, simulate

RATE = 100.0
WINDOWS = {1.0: RATE, 10.0: RATE, 60.0: 20.0}
KINDS: tuple[WindowKind, ...] = ("bucket", "fixed", "log")


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


def issue38() -> None:
    print("\n| limiter | share of the limit, counting the bucket | of rate x wall | refused |\n|---|---|---|---|")
    for late in (False, True):
        for kind in KINDS:
            for window, rate in WINDOWS.items():
                for hints in ("ms", "seconds", "message"):
                    hard = RateLimits.hard(rpm=rate * 60, headers=False)
                    limits = replace(hard, window=window, hints=hints, used_counts_request=True, kind=kind)
                    calls = int(2000 + 2 * rate * window)
                    if late:
                        run = simulate(limits, calls=calls, refusal_latency=0.3, arrival=0.05)
                    else:
                        run = simulate(limits, calls=calls)
                    share = run.answered / (rate * run.seconds + rate * window)
                    walled = run.answered / (rate * run.seconds)
                    bar = "" if share >= 0.85 and run.share_refused < 0.05 else " (below the bar)"
                    name = f"hard, {rate * 60:.0f} RPM, {window:g} s {kind}, hints in {hints}"
                    name += ", 429s 300 ms late, arrivals up to 50 ms late" if late else ""
                    print(f"| {name} | {share:.1%}{bar} | {walled:.1%} | {run.share_refused:.2%} |", flush=True)


def main() -> None:
    print("| limiter | share of the limit | refused |\n|---|---|---|")
    issue29()
    issue38()


if __name__ == "__main__":
    main()
