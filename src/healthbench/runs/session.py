"""One session of a run in an output folder: bind its store, build the grader (and policy), live or through
batches, run the jobs, and write run.json, usage.json and the report, with the summary line."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from healthbench.api.batch.client import BatchClient
from healthbench.api.batch.records import BatchSettings
from healthbench.api.client import ApiClient, Completer, describe_pace
from healthbench.api.wire import Usage
from healthbench.errors import QuotaExhausted
from healthbench.grading.grader import Grader
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig
from healthbench.reporting.report import write_report
from healthbench.runs.folder import RUN, USAGE, write_json_atomic
from healthbench.runs.policy import Policy, PolicyConfig
from healthbench.runs.pricing import CostMeter
from healthbench.runs.runner import Job, RunOutcome, run_jobs
from healthbench.runs.store import STORE, Store

# Seconds the answers in flight when the quota ran out may take to arrive: the command stops within 30 s.
_LANDING = 20.0


@dataclass(frozen=True)
class BatchChoice:
    """Which calls go through the Batch API: the grader's always, the policy's with `policy`."""

    settings: BatchSettings
    policy: bool = False


def execute(
    jobs: Sequence[Job],
    out: Path,
    grader_config: GraderConfig,
    identity: dict[str, Any],
    *,
    policy: PolicyConfig | None = None,
    batch: BatchChoice | None,
    seed: int,
    prices: Path | None,
    progress: bool,
    extra: dict[str, Any],
    html: bool = True,
    length_adjustment: LengthAdjustment | None = None,
) -> RunOutcome:
    """Run jobs in `out` with its store, write run.json, usage.json and (with `html`) the report; exit 1 on
    failures. With `length_adjustment`, the headline is the length-adjusted score."""

    def start(grader: Grader, policy: Policy | None, store: Store, costs: CostMeter) -> Awaitable[RunOutcome]:
        return run_jobs(
            jobs,
            grader,
            store,
            out,
            policy=policy,
            seed=seed,
            progress=progress,
            describe_cost=progress_line(costs, {"policy": policy.client if policy else None, "grader": grader.client}),
            sample_first=batch is not None,
            length_adjustment=length_adjustment,
        )

    def headline(metrics: dict[str, float | int]) -> str:
        kind = "score" if length_adjustment is None else "length-adjusted score"
        return (
            f"{kind} {metrics['score']:.4f} ± {metrics['score:bootstrap_std']:.4f} over "
            f"{metrics['score:n_samples']} samples"
        )

    return run_session(
        start,
        out,
        grader_config,
        identity,
        policy=policy,
        batch=batch,
        seed=seed,
        prices=prices,
        extra=extra,
        write=write_report if html else None,
        headline=headline,
        units=(len(jobs), "samples"),
    )


def run_session(
    start: Callable[[Grader, Policy | None, Store, CostMeter], Awaitable[RunOutcome]],
    out: Path,
    grader_config: GraderConfig,
    identity: dict[str, Any],
    *,
    policy: PolicyConfig | None,
    batch: BatchChoice | None,
    seed: int,
    prices: Path | None,
    extra: dict[str, Any],
    write: Callable[[Path], Path] | None,
    headline: Callable[[dict[str, float | int]], str],
    units: tuple[int, str],
) -> RunOutcome:
    """One session of a run in `out`: bind its store, run `start`, write run.json, usage.json and the report
    (`write`), print each failure and exit 1 if there were any, else print `headline` and the cost."""
    costs = CostMeter(prices, grader_config.model, policy.model if policy else None)
    store = Store(out / STORE)
    try:
        store.bind_config(identity)
        batchers: list[BatchClient] = []

        def batched(purpose: str, settings: BatchSettings) -> Callable[[ApiClient], Completer]:
            def wrap(chat: ApiClient) -> Completer:
                batchers.append(BatchClient(chat, store, purpose, settings, _notify))
                return batchers[-1]

            return wrap

        grader = grader_config.build(cache=store, wrap=batched("grader", batch.settings) if batch else None)
        policy_wrap = batched("policy", batch.settings) if batch and batch.policy else None
        sampler = None if policy is None else Policy(policy, policy_wrap)
        _announce_batches(store, batchers, batch)

        async def run() -> RunOutcome:
            try:
                outcome = await start(grader, sampler, store, costs)
                if not outcome.deferred:
                    for batcher in batchers:
                        batcher.release()
                return outcome
            except QuotaExhausted:
                await _land_in_flight()
                raise
            finally:
                await grader.client.aclose()
                if sampler is not None:
                    await sampler.client.aclose()

        started = time.time()
        try:
            outcome = asyncio.run(run())
        except QuotaExhausted as exc:
            click.echo(
                f"healthbench: stopped, {exc}. Everything answered is kept in {out / STORE}: add credit (or use "
                "another key), then run the same command again to go on from there.",
                err=True,
            )
            sys.exit(1)
        cache_hits = store.hits
        paid_policy, paid_grader = store.spent()
        batches_made, batch_requests = store.batch_totals()
        still_out = len(store.open_batches())
    finally:
        store.close()
    count, unit = units
    session = costs.usage_report(outcome.policy_usage, outcome.grader_usage)
    whole = costs.usage_report(paid_policy, paid_grader)
    batches = {
        "this_session": {
            "batches": sum(b.batches_submitted for b in batchers),
            "requests": sum(b.requests_submitted for b in batchers),
        },
        "whole_run": {"batches": batches_made, "requests": batch_requests},
    }
    write_json_atomic(
        out / USAGE,
        {"this_session": session, "whole_run": whole, "verdict_cache_hits": cache_hits, "batches": batches},
    )
    write_json_atomic(
        out / RUN,
        identity
        | grader_config.describe()
        | extra
        | {
            "seed": seed,
            "samples": count,
            "failed": len(outcome.failures),
            "deferred": outcome.deferred,
            "seconds": round(time.time() - started, 3),
            "cost_usd": whole["cost_usd"],
        },
    )
    report = f", report in {write(out)}" if write is not None else ""
    for failure in outcome.failures:
        click.echo(f"healthbench: not graded: {failure}", err=True)
    if outcome.deferred:
        click.echo(
            f"healthbench: {outcome.deferred} of {count} {unit} wait on {still_out} batch(es) still out, and "
            f"nothing of theirs is sent again; run the same command again to collect them.",
            err=True,
        )
    if outcome.failures:
        click.echo(
            f"healthbench: {len(outcome.failures)} of {count} {unit} could not be graded; no score written. "
            f"Everything answered is kept in {out / STORE}: run the same command again to finish.",
            err=True,
        )
        sys.exit(1)
    if outcome.metrics is None:
        return outcome
    calls = outcome.policy_usage.calls + outcome.grader_usage.calls
    batched_note = ""
    if batchers:
        made = batches["this_session"]
        batched_note = f" in {made['batches']} batches"
    click.echo(
        f"{headline(outcome.metrics)}{outcome.summary_note}; {calls} calls this session{batched_note} "
        f"({cache_hits} verdicts reused), "
        f"cost {costs.describe(session)}; metrics in {out / 'metrics.json'}{report}"
    )
    return outcome


def progress_line(costs: CostMeter, clients: Mapping[str, Completer | None]) -> Callable[[Usage, Usage], str]:
    """What the progress bar shows after the counts: calls per second, cost so far, and each live key's pace."""

    def line(policy: Usage, grader: Usage) -> str:
        return ", ".join(part for part in (costs.progress(policy, grader), describe_pace(clients)) if part)

    return line


async def _land_in_flight() -> None:
    """With the quota gone nothing new starts; what is already out is paid for, so let it land in the store
    (each of the other samples then stops as the first did, and is not reported again)."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        done, _ = await asyncio.wait(others, timeout=_LANDING)
        for task in done:
            if not task.cancelled():
                task.exception()


def _notify(message: str) -> None:
    """A batch status line, printed above the progress bar."""
    tqdm.write(f"healthbench: {message}", file=sys.stderr)


def _announce_batches(store: Store, batchers: Sequence[BatchClient], batch: BatchChoice | None) -> None:
    """Say what is being waited for from an earlier session, or warn that it will be paid for again."""
    waiting = sum(batcher.reattached for batcher in batchers)
    if waiting:
        _notify(f"re-attaching to {waiting} batch{'es' if waiting != 1 else ''} submitted earlier")
    left = len(store.open_batches()) - waiting
    if left:
        flags = "--batch --policy-batch" if batch is not None else "--batch"
        _notify(
            f"{left} batch(es) submitted by an earlier session of this run are not collected by this one, and "
            f"their requests are sent again; stop now and run with {flags} to collect them instead"
        )
