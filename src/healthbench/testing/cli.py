"""Serve a ``FakeOpenAI`` from the command line: ``python -m healthbench.testing --port 8000``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import sys
from collections.abc import Sequence
from typing import Any

from healthbench.testing.graders import GRADERS
from healthbench.testing.hosts import THINKING, Host
from healthbench.testing.limits import RateLimits
from healthbench.testing.server import FAULT_KINDS, FakeOpenAI

__all__ = ["main"]


async def _serve_forever(server: FakeOpenAI) -> None:
    print(await server._start_site(), flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server._stop_site()


def _limits(args: argparse.Namespace) -> RateLimits | None:
    if args.rpm is None and args.tpm is None and args.quota is None:
        return None
    hard = RateLimits.hard() if args.hard_limiter else RateLimits()
    return RateLimits(
        rpm=args.rpm,
        tpm=args.tpm,
        window=args.limit_window,
        count_refused=not args.refused_free,
        headers=not args.no_rate_headers,
        numbers=not args.no_limit_numbers,
        quota=args.quota,
        optimistic_hints=args.optimistic_hints or hard.optimistic_hints,
        debt=hard.debt,
        retry_headers=hard.retry_headers,
        refusal_latency=args.refusal_latency,
        hints=args.retry_hints,
        used_counts_request=args.used_counts_request,
        kind=args.window_kind,
    )


def _host(args: argparse.Namespace) -> Host | None:
    if args.think is None and not args.refuse_param and not args.no_usage:
        return None
    return Host(args.think, args.thinking_tokens, tuple(args.refuse_param), not args.no_usage)


def _raise_open_files() -> None:
    """Raise this process's soft limit on open files to its hard limit, as vLLM's server does at start-up.

    Each connection is a file descriptor, and the usual soft limit is 1,024: a judge taking more connections at
    once than that would fail to accept the rest (EMFILE), where the server it plays takes them all and queues the
    requests. Raising the soft limit up to the hard one needs no privilege (an unlimited hard limit is met with the
    kernel's usual ceiling, 2**20); where even that fails, the limit stays, and stderr says so.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        print(
            f"open files stay limited to {soft} ({exc}): at most about that many connections at once", file=sys.stderr
        )


def main(argv: Sequence[str] | None = None) -> None:
    """Serve a FakeOpenAI in the foreground until interrupted, printing its base URL on stdout."""
    parser = argparse.ArgumentParser(
        prog="python -m healthbench.testing", description="A fake OpenAI-compatible server for tests and benchmarks."
    )
    passed: list[str] = []

    def server_option(*flags: str, **settings: Any) -> None:
        """An option `FakeOpenAI` takes as it is, by its dest's name: named once, here, and passed on by that name."""
        passed.append(parser.add_argument(*flags, **settings).dest)

    server_option("--host", default="127.0.0.1")
    server_option("--port", type=int, default=8000, help="0 picks a free port")
    server_option("--latency", type=float, default=0.0, help="seconds before each answer")
    server_option("--fault-rate", type=float, default=0.0)
    parser.add_argument("--faults", default="", help=f"comma-separated subset of {','.join(FAULT_KINDS)}")
    server_option("--fault-retry-after", type=float, default=0.0, help="Retry-After of an injected 429")
    server_option("--rate-limit", type=float, default=None, help="requests per second")
    server_option("--latency-jitter", type=float, default=0.0, help="seconds either side of --latency")
    parser.add_argument("--rpm", type=float, help="requests per minute, as OpenAI limits them (not with --rate-limit)")
    parser.add_argument("--tpm", type=float, help="tokens per minute: prompt plus output cap, counted on arrival")
    parser.add_argument("--limit-window", type=float, default=1.0, help="seconds of a minute's limit usable at once")
    parser.add_argument("--refused-free", action="store_true", help="refused requests do not count against limits")
    parser.add_argument(
        "--no-rate-headers", action="store_true", help="send no x-ratelimit-* (nor Retry-After, unless --hard-limiter)"
    )
    parser.add_argument("--no-limit-numbers", action="store_true", help="429 messages name no limit or wait")
    parser.add_argument(
        "--optimistic-hints", action="store_true", help="retry hints computed before the refused request is counted"
    )
    parser.add_argument(
        "--hard-limiter",
        action="store_true",
        help="refused requests counted into a debt without bound, hints one request short, retry-after-ms always",
    )
    parser.add_argument("--refusal-latency", type=float, default=0.0, help="seconds before a 429 is answered")
    parser.add_argument(
        "--retry-hints",
        choices=("ms", "seconds", "message"),
        default="ms",
        help="a 429's wait: retry-after-ms and Retry-After; Retry-After and the message in whole seconds only; "
        "the message only",
    )
    parser.add_argument(
        "--used-counts-request", action="store_true", help="a 429 message's Used counts the refused request too"
    )
    parser.add_argument(
        "--window-kind",
        choices=("bucket", "fixed", "log"),
        default="bucket",
        help="the window refilled continuously, emptied at each multiple of --limit-window, or a sliding log",
    )
    parser.add_argument("--quota", type=int, help="answered requests before insufficient_quota")
    server_option("--seed", type=int, default=0)
    server_option("--batch-delay", type=float, default=0.0, help="seconds until a batch completes")
    server_option("--batch-fail-rate", type=float, default=0.0, help="share of batch lines that fail")
    server_option("--batch-malformed-rate", type=float, default=0.0, help="share of unusable batch verdicts")
    server_option("--batch-token-limit", type=int, help="enqueued tokens a batch may not take the queue past")
    parser.add_argument(
        "--lenient-params", action="store_true", help="answer what OpenAI refuses (temperature for o3, ...)"
    )
    server_option(
        "--grader",
        choices=GRADERS,
        default="hashed",
        help="how grader requests are judged: a hash of the prompt; fooled by replies that address the grader; "
        "blind to the reply; seeded coin flips",
    )
    parser.add_argument("--think", choices=THINKING, help="grader answers think first, as a host without a parser")
    parser.add_argument("--thinking-tokens", type=int, default=300, help="how long the thinking is (with --think)")
    parser.add_argument(
        "--refuse-param", action="append", default=[], help="a parameter refused with Azure's 400 (repeatable)"
    )
    parser.add_argument("--no-usage", action="store_true", help="answers carry no usage")
    server_option(
        "--max-running",
        type=int,
        help="requests in service at once, each taking --latency; the rest wait in arrival order, as vLLM's "
        "max_num_seqs [default: no bound]",
    )
    server_option("--served-model-name", default="fake-judge", help="the model /v1/models lists and /metrics labels")
    args = parser.parse_args(argv)
    try:
        server = FakeOpenAI(
            **{name: getattr(args, name) for name in passed},
            faults=[f for f in args.faults.split(",") if f],
            limits=_limits(args),
            record=False,
            strict_params=not args.lenient_params,
            judge_host=_host(args),
        )
    except ValueError as exc:
        parser.error(str(exc))
    _raise_open_files()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(server))
