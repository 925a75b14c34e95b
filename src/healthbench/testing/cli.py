"""Serve a ``FakeOpenAI`` from the command line: ``python -m healthbench.testing --port 8000``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Sequence

from healthbench.testing.server import FAULT_KINDS, FakeOpenAI

__all__ = ["main"]


async def _serve_forever(server: FakeOpenAI) -> None:
    print(await server._start_site(), flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server._stop_site()


def main(argv: Sequence[str] | None = None) -> None:
    """Serve a FakeOpenAI in the foreground until interrupted, printing its base URL on stdout."""
    parser = argparse.ArgumentParser(
        prog="python -m healthbench.testing", description="A fake OpenAI-compatible server for tests and benchmarks."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--faults", default="", help=f"comma-separated subset of {','.join(FAULT_KINDS)}")
    parser.add_argument("--rate-limit", type=float, default=None, help="requests per second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-delay", type=float, default=0.0, help="seconds until a batch completes")
    parser.add_argument("--batch-fail-rate", type=float, default=0.0, help="share of batch lines that fail")
    parser.add_argument("--batch-malformed-rate", type=float, default=0.0, help="share of unusable batch verdicts")
    parser.add_argument("--batch-token-limit", type=int, help="enqueued tokens a batch may not take the queue past")
    parser.add_argument(
        "--lenient-params", action="store_true", help="answer what OpenAI refuses (temperature for o3, ...)"
    )
    args = parser.parse_args(argv)
    try:
        server = FakeOpenAI(
            fault_rate=args.fault_rate,
            faults=[f for f in args.faults.split(",") if f],
            seed=args.seed,
            rate_limit=args.rate_limit,
            latency=args.latency,
            host=args.host,
            port=args.port,
            record=False,
            batch_delay=args.batch_delay,
            batch_fail_rate=args.batch_fail_rate,
            batch_malformed_rate=args.batch_malformed_rate,
            batch_token_limit=args.batch_token_limit,
            strict_params=not args.lenient_params,
        )
    except ValueError as exc:
        parser.error(str(exc))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(server))
