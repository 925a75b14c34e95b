"""The gate's own cost per paced start, at a step's concurrency: `Gate.start` and `Gate.answered` driven by N
workers in one event loop, each start followed by a simulated request of fixed latency, under a known limit that
binds (the pace, not the latency, sets the rate), with no HTTP at all.

Prints, per concurrency: starts per second reached against the pace's rate, CPU seconds per start (this process's
user + system time over the run, so the figure holds on a loaded machine better than wall time does) and how
many times a start looked at the pace (`Pacer.delay` calls per start: the wake-ups).

    .venv/bin/python benchmarks/bench_gate.py [--starts 4000] [--latency 0.2] [--in-flight 100 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from healthbench.api.pacing.gate import Gate
from healthbench.api.pacing.pacer import Pacer
from healthbench.api.pacing.state import HEADROOM


async def drive(starts: int, in_flight: int, latency: float, rpm: float, headers: bool) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and `Pacer.delay` calls of `starts` paced starts by `in_flight` workers."""
    gate = Gate()
    gate.set_limits(rpm, None)
    looks = 0
    delay = Pacer.delay

    def counted(self: Pacer, now: float, cost: int) -> tuple[float, str | None, tuple[float, float]]:
        nonlocal looks
        looks += 1
        return delay(self, now, cost)

    Pacer.delay = counted  # type: ignore[method-assign]
    remaining = starts
    answer = (
        {"x-ratelimit-limit-requests": str(int(rpm)), "x-ratelimit-remaining-requests": str(int(rpm / 2))}
        if headers
        else {}
    )

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            ticket = await gate.start(500)
            await asyncio.sleep(latency)
            await gate.answered(ticket, answer)

    cpu = time.process_time()
    wall = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(in_flight)))
    finally:
        Pacer.delay = delay  # type: ignore[method-assign]
    return time.perf_counter() - wall, time.process_time() - cpu, looks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=4000)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[100, 1000])
    args = parser.parse_args()
    print(f"{'in flight':>9} {'headers':>7} {'rate/s':>8} {'of pace':>8} {'CPU us/start':>13} {'looks/start':>12}")
    for in_flight in args.in_flight:
        # A limit at 80% of what the workers could start: the pace binds, the latency does not.
        rpm = 0.8 * in_flight / args.latency * 60
        for headers in (False, True):
            wall, cpu, looks = asyncio.run(drive(args.starts, in_flight, args.latency, rpm, headers))
            rate = args.starts / (wall - args.latency)  # the last answers' latency is no start
            pace = rpm / 60 * HEADROOM
            print(
                f"{in_flight:>9} {'yes' if headers else 'no':>7} {rate:>8.0f} {rate / pace:>8.0%} "
                f"{cpu / args.starts * 1e6:>13.0f} {looks / args.starts:>12.2f}"
            )


if __name__ == "__main__":
    main()
