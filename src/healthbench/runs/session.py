"""One session of a run in its output folder: open the store, build the grader (and the policy), live or through
batches, run the jobs, and account for them in run.json and usage.json. An attacker's rewrites (`runs.attack`) are
a run of a model alone: its session builds no grader. The session returns what happened;
the command line says it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healthbench.api.batch.client import BatchClient
from healthbench.api.batch.records import BatchSettings
from healthbench.api.client import ApiClient, Completer, describe_pace
from healthbench.api.wire import Usage
from healthbench.errors import EndpointUnusable, Interrupted, OutputUnusable, QuotaExhausted
from healthbench.grading.grader import Grader
from healthbench.grading.settings import GraderConfig
from healthbench.runs.folder import STORE, RunFolder
from healthbench.runs.lock import writing
from healthbench.runs.policy import Policy, PolicyConfig
from healthbench.runs.pricing import CostMeter
from healthbench.runs.progress import Progress, Quiet
from healthbench.runs.records import BatchCounts, BatchTotals, RunRecord, RunStats, UsageRecord
from healthbench.runs.runner import Job, RunOutcome, run_jobs
from healthbench.runs.spec import LEFT_OUT, RunSpec
from healthbench.runs.stopping import Stopping, signals_stop
from healthbench.runs.store import Store

# Seconds the answers in flight when the quota ran out, or the user pressed Ctrl-C, may take to arrive: the
# command stops within 30 s.
_LANDING = 20.0


@dataclass(frozen=True)
class BatchChoice:
    """Which calls go through the Batch API: the grader's always, the policy's with `policy`."""

    settings: BatchSettings
    policy: bool = False


@dataclass(frozen=True)
class Wiring:
    """What a session hands the run it starts: the grader and policy it built (no grader for a run of a model
    alone), the store, and the progress with the status line (pace and cost) to show beside it."""

    built_grader: Grader | None
    policy: Policy | None
    store: Store
    progress: Progress
    status: Callable[[Usage, Usage], str]

    @property
    def grader(self) -> Grader:
        """The grader of a run that grades (every run but a model's alone, whose start never asks for one)."""
        assert self.built_grader is not None, "a session built without a grader has none to grade with"
        return self.built_grader


Start = Callable[[Wiring], Awaitable[RunOutcome]]


@dataclass
class SessionResult:
    """What one session did: the run's outcome, usage.json as written, and the batches and report."""

    outcome: RunOutcome
    folder: RunFolder
    usage: UsageRecord
    samples: int
    cache_hits: int = 0
    batches_submitted: int = 0
    batches_out: int = 0
    report: Path | None = None
    batched: bool = False


@dataclass
class _Built:
    """The clients of one session: its grader (None for a run of a model alone), its policy, and the batch
    clients among them."""

    grader: Grader | None
    policy: Policy | None
    batchers: list[BatchClient]


def jobs_start(jobs: Sequence[Job], folder: RunFolder, spec: RunSpec, *, sample_first: bool) -> Start:
    """The run of a grading command: every job sampled (where needed) and graded by `run_jobs`."""

    def start(wiring: Wiring) -> Awaitable[RunOutcome]:
        return run_jobs(
            jobs,
            wiring.grader,
            wiring.store,
            folder,
            policy=wiring.policy,
            seed=spec.seed,
            progress=wiring.progress,
            status=wiring.status,
            sample_first=sample_first,
            length_adjustment=spec.adjustment,
        )

    return start


def run_session(
    start: Start,
    folder: RunFolder,
    spec: RunSpec,
    grader_config: GraderConfig | None,
    *,
    samples: int,
    policy: PolicyConfig | None = None,
    batch: BatchChoice | None = None,
    prices: Path | None = None,
    progress: Progress | None = None,
    report: Callable[[Path], Path] | None = None,
) -> SessionResult:
    """One session of the run `spec` in `folder` (graded as `grader_config` says; None for a run of the policy
    alone): hold the folder's writer lock (`FolderBusy`, before anything is
    sent, when another live process holds it), bind its store to the spec's identity (`ConfigMismatch` for a
    folder of another run), run `start`, then write usage.json and run.json and, with `report`, the report.

    `QuotaExhausted` when the account has no quota left: what was in flight lands in the store first, and the
    error says the same command goes on from there.
    """
    with writing(folder.path):
        return _session(start, folder, spec, grader_config, samples, policy, batch, prices, progress, report)


def _session(
    start: Start,
    folder: RunFolder,
    spec: RunSpec,
    grader_config: GraderConfig | None,
    samples: int,
    policy: PolicyConfig | None,
    batch: BatchChoice | None,
    prices: Path | None,
    progress: Progress | None,
    report: Callable[[Path], Path] | None,
) -> SessionResult:
    """`run_session`, with the folder's writer lock held."""
    progress = progress or Quiet()
    costs = CostMeter(prices, grader_config.model if grader_config else None, policy.model if policy else None)
    store = Store(folder / STORE)
    try:
        store.bind_config(spec.identity(), LEFT_OUT)
        if (moved := _servers_moved(folder, spec)) is not None:
            progress.note(moved)
        built = _build(grader_config, policy, batch, store, progress)
        started, paid_before = time.time(), store.spent()
        outcome = _run(start, built, store, costs, progress, folder, samples)
        result = _account(folder, outcome, built, store, costs, samples, paid_before)
    finally:
        store.close()
    if store.failure is not None:  # the last answers could not be committed: the run is not finished
        raise store.failure
    folder.write_failures(outcome.failed)
    stats = RunStats(
        samples=samples,
        failed=len(outcome.failures),
        deferred=outcome.deferred,
        seconds=round(time.time() - started, 3),
        cost_usd=result.usage.whole_run.cost_usd,
    )
    folder.write(RunRecord(spec=spec, stats=stats))
    if report is not None:
        result.report = report(folder.path)
    return result


def _servers_moved(folder: RunFolder, spec: RunSpec) -> str | None:
    """What a resumed run says when its grader's servers are not its last session's (another pool of the same model,
    which the identity allows: the servers decide no verdict); None when they are, or for a first session."""
    last = folder.read_run()
    if last is None or last.spec.grader.base_url in (None, spec.grader.base_url):
        return None
    return (
        f"the grader {spec.grader.model} is now at {spec.grader.base_url}, not {last.spec.grader.base_url} as in the "
        "last session: the same model, so the verdicts so far stand and the rest are asked there"
    )


def _build(
    grader_config: GraderConfig | None,
    policy: PolicyConfig | None,
    batch: BatchChoice | None,
    store: Store,
    progress: Progress,
) -> _Built:
    """The session's grader and policy, live or wrapped in batch clients that keep their ledger in the store."""
    batchers: list[BatchClient] = []

    def batched(purpose: str, settings: BatchSettings) -> Callable[[ApiClient], Completer]:
        def wrap(client: ApiClient) -> Completer:
            batchers.append(BatchClient(client, store, purpose, settings, progress.note))
            return batchers[-1]

        return wrap

    grader = None
    if grader_config is not None:
        grader = grader_config.build(cache=store, wrap=batched("grader", batch.settings) if batch else None)
    policy_wrap = batched("policy", batch.settings) if batch and batch.policy else None
    sampler = None if policy is None else Policy(policy, policy_wrap)
    _announce_batches(store, batchers, batch, progress)
    return _Built(grader, sampler, batchers)


def _run(
    start: Start,
    built: _Built,
    store: Store,
    costs: CostMeter,
    progress: Progress,
    folder: RunFolder,
    samples: int,
) -> RunOutcome:
    """Run the session's jobs in an event loop of its own; close its clients whatever happens.

    On Ctrl-C (the first SIGINT cancels the loop's main task) or SIGTERM (docker stop, systemd, SLURM: the same,
    in the main thread) nothing more is sent, what is on the wire lands in the store, and `Interrupted` says how
    many samples are saved and which signal came; a second one stops at once."""
    clients = {
        "policy": built.policy.client if built.policy else None,
        "grader": built.grader.client if built.grader else None,
    }
    wiring = Wiring(built.grader, built.policy, store, progress, status_line(costs, clients))

    async def run() -> RunOutcome:
        task = asyncio.current_task()
        assert task is not None
        stopping = Stopping(task)
        store.on_failure = task.cancel  # a store the disk has no room for: the run stops, as on a signal
        api_clients = [c for c in clients.values() if isinstance(c, ApiClient)]
        # Shielded, so that a signal reaches this task alone and the work can land what is out before it stops.
        work = asyncio.ensure_future(start(wiring))
        with signals_stop(stopping):
            try:
                outcome = await asyncio.shield(work)
                if not outcome.deferred:
                    for batcher in built.batchers:
                        batcher.release()
                return outcome
            except QuotaExhausted:
                stopping.winding_down = True
                await _land_in_flight(stopping)
                raise
            except OutputUnusable:
                # results.jsonl could not be written (a full disk): what is on the wire cannot be kept either.
                stopping.winding_down = True
                stopping.hurry.set()
                await _land_and_stop(work, api_clients, stopping)
                raise
            except asyncio.CancelledError:
                stopping.winding_down = True
                if store.failure is not None:
                    stopping.hurry.set()
                await _land_and_stop(work, api_clients, stopping)
                if store.failure is not None:
                    raise store.failure from None
                signal_name = stopping.signal or "SIGINT"
                raise Interrupted(folder.count_results(), samples, str(folder / STORE), signal_name) from None
            finally:
                if built.grader is not None:
                    await built.grader.client.aclose()
                if built.policy is not None:
                    await built.policy.client.aclose()

    kept = f"everything answered is kept in {folder / STORE}"
    try:
        return asyncio.run(run())
    except QuotaExhausted as exc:
        raise exc.kept_in(str(folder / STORE)) from None
    except EndpointUnusable as exc:
        if exc.refused:
            raise exc.advised(f"no score is written ({kept})") from None
        raise exc.advised(f"{kept}, and the same command goes on from there once the endpoint answers") from None


def _account(
    folder: RunFolder,
    outcome: RunOutcome,
    built: _Built,
    store: Store,
    costs: CostMeter,
    samples: int,
    paid_before: tuple[list[Usage], list[Usage]],
) -> SessionResult:
    """Write usage.json: this session's tokens and cost beside the whole run's, and the batches made.

    This session's figures are what it added to the store, every call paid for and answered, including those
    of samples that then failed (a later session reuses them for nothing): so the sessions' figures add up to
    the whole run's."""
    paid_policy, paid_grader = store.spent()
    session_policy, session_grader = _since(paid_before[0], paid_policy), _since(paid_before[1], paid_grader)
    batches_made, batch_requests = store.batch_totals()
    submitted = sum(b.batches_submitted for b in built.batchers)
    batches = BatchTotals(
        this_session=BatchCounts(batches=submitted, requests=sum(b.requests_submitted for b in built.batchers)),
        whole_run=BatchCounts(batches=batches_made, requests=batch_requests),
    )
    usage = UsageRecord(
        this_session=costs.usage_report(session_policy, session_grader),
        whole_run=costs.usage_report(paid_policy, paid_grader),
        verdict_cache_hits=store.hits,
        batches=batches,
    )
    folder.write(usage)
    return SessionResult(
        outcome,
        folder,
        usage,
        samples,
        cache_hits=store.hits,
        batches_submitted=submitted,
        batches_out=len(store.open_batches()),
        batched=bool(built.batchers),
    )


def _since(before: Sequence[Usage], after: Sequence[Usage]) -> list[Usage]:
    """Each part of `after` (live, batch) less the same part of `before`."""
    parts = []
    for old, new in zip(before, after, strict=True):
        spent = old.as_dict()
        numbers = {key: value - spent.get(key, 0) for key, value in new.as_dict().items() if key != "batch"}
        parts.append(Usage(**numbers, batch=new.batch))
    return parts


def status_line(costs: CostMeter, clients: Mapping[str, Completer | None]) -> Callable[[Usage, Usage], str]:
    """What the progress shows after the counts: calls answered per second and the cost so far, then each live
    key's request starts per second (retries included), both over the last five seconds:
    "answered 58 calls/s, $1.23 so far; started policy+grader: 61 req/s, TPM-bound"."""

    def line(policy: Usage, grader: Usage) -> str:
        pace = describe_pace(clients)
        return costs.progress(policy, grader) + (f"; started {pace}" if pace else "")

    return line


async def _land_in_flight(stopping: Stopping) -> None:
    """With the quota gone nothing new starts; what is already out is paid for, so let it land in the store
    (each of the other samples then stops as the first did, and is not reported again), unless a signal hurries."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if not others:
        return
    landing: asyncio.Future[Any] = asyncio.ensure_future(asyncio.wait(others, timeout=_LANDING))
    hurried: asyncio.Future[Any] = asyncio.ensure_future(stopping.hurried())
    await asyncio.wait([landing, hurried], return_when=asyncio.FIRST_COMPLETED)
    for future in (landing, hurried):
        future.cancel()
    await asyncio.gather(landing, hurried, return_exceptions=True)
    for task in others:
        if task.done() and not task.cancelled():
            task.exception()


async def _land_and_stop(work: asyncio.Future[RunOutcome], clients: Sequence[ApiClient], stopping: Stopping) -> None:
    """Send nothing more, let what is on the wire land (within `_LANDING` seconds, or until a second signal), then
    stop the work."""
    for client in clients:
        client.halt()
    landing: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*(client.landed() for client in clients)))
    hurried: asyncio.Future[Any] = asyncio.ensure_future(stopping.hurried())
    await asyncio.wait([landing, hurried], timeout=_LANDING, return_when=asyncio.FIRST_COMPLETED)
    for future in (landing, hurried, work):
        future.cancel()
    await asyncio.gather(work, landing, hurried, return_exceptions=True)


def _announce_batches(
    store: Store, batchers: Sequence[BatchClient], batch: BatchChoice | None, progress: Progress
) -> None:
    """Say what is being waited for from an earlier session, or warn that it will be paid for again."""
    waiting = sum(batcher.reattached for batcher in batchers)
    if waiting:
        progress.note(f"re-attaching to {waiting} batch{'es' if waiting != 1 else ''} submitted earlier")
    left = len(store.open_batches()) - waiting
    if left:
        settings = "`batch` and `policy_batch`" if batch is not None else "`batch`"
        progress.note(
            f"{left} batch(es) submitted by an earlier session of this run are not collected by this one, and "
            f"their requests are sent again; stop now and run with {settings} to collect them instead"
        )
