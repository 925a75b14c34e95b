"""Running samples through the policy and the grader, and writing the results as they finish.

Every command that grades (`grade`, `eval`, `baseline`) is a list of jobs run here. Replies and verdicts are kept
in the run's store as they arrive, and `results.jsonl` gets one line per sample the moment it is graded, so a
crash loses at most what was in flight. If any sample cannot be graded, no `metrics.json` is written: a partial
score would be a wrong score.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from healthbench.api.client import ApiClient
from healthbench.api.wire import Usage
from healthbench.data.schema import Row
from healthbench.errors import (
    Deferred,
    EndpointUnusable,
    GradingError,
    OutputUnusable,
    PolicyMisuse,
    RequestFailed,
    SampleError,
)
from healthbench.grading.aggregate import aggregate_samples
from healthbench.grading.grader import Grader
from healthbench.grading.sample import grade_sample
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.transforms import Transform
from healthbench.runs.folder import METRICS, RunFolder
from healthbench.runs.policy import REFUSED_REPLY, Policy, PromptRefusal, RefusalGuard, misuse, prompt_refusal
from healthbench.runs.progress import Progress, Quiet
from healthbench.runs.records import FailureRecord, PolicyErrorRecord, Record, SampleRecord
from healthbench.runs.store import Store


@dataclass(frozen=True)
class Job:
    """One sample to grade: a task, which repeat of it, and a fixed reply or None to ask the policy; with
    `transform` (a rewrite step: `grading.transforms.Transform`), that reply rewritten, graded as a sample of its own
    (a probe's). Jobs of one task and repeat share its reply: the policy is asked once."""

    row: Row
    repeat: int = 0
    reply: str | None = None
    transform: Transform | None = None

    @property
    def transform_name(self) -> str | None:
        """The name of its transform, as its records name it; None for the reply as it is."""
        return None if self.transform is None else self.transform.name


@dataclass
class RunOutcome:
    """What a run produced: metrics only when every sample was graded; usage is what this session paid;
    `deferred` counts samples left waiting in batches for a later session, `refused` the samples graded with
    the reference's placeholder for a prompt the model's provider refused, `suspect` the samples whose reply
    addresses the grader (`grading.suspect`); `failed` holds a failures.jsonl
    record per failure (which sample, and why)."""

    metrics: dict[str, float | int] | None
    failures: list[Exception] = field(default_factory=list)
    failed: list[FailureRecord] = field(default_factory=list)
    deferred: int = 0
    policy_usage: Usage = field(default_factory=Usage)
    grader_usage: Usage = field(default_factory=Usage)
    done: int = 0
    refused: int = 0
    suspect: int = 0


RecordT = TypeVar("RecordT", bound=Record)


class ResultSink(Generic[RecordT]):
    """results.jsonl written afresh, a line per sample the moment it is done, with the run's counters and its
    progress; shared by every kind of run so they record and report progress alike."""

    def __init__(
        self,
        folder: RunFolder,
        total: int,
        outcome: RunOutcome,
        *,
        unit: str,
        progress: Progress,
        status: Callable[[Usage, Usage], str] | None = None,
    ) -> None:
        folder.discard(METRICS)
        self.records: list[RecordT] = []
        self._outcome = outcome
        self._status = status
        self._file = folder.open_results()
        self._progress = progress
        progress.start(total, unit)

    def _describe(self) -> str:
        if self._status is None:
            return ""
        return self._status(self._outcome.policy_usage, self._outcome.grader_usage)

    def add(self, record: RecordT) -> None:
        """Write one finished sample."""
        self._file.write(record)
        self.records.append(record)
        self._outcome.done += 1
        self._progress.advance(self._describe)

    def fail(
        self, error: Exception, prompt_id: str | None = None, repeat: int | None = None, *, transform: str | None = None
    ) -> None:
        """Count a sample that could not be done; `prompt_id`, `repeat` and a probe's `transform` name it for
        failures.jsonl."""
        self._outcome.failures.append(error)
        self._outcome.failed.append(FailureRecord.of(error, prompt_id, repeat, transform=transform))
        self._progress.advance(self._describe)

    def defer(self) -> None:
        """Count a sample whose answer is still out in a batch."""
        self._outcome.deferred += 1

    def close(self) -> None:
        """Close the file and end the progress."""
        self._progress.close()
        self._file.close()


class Reply(NamedTuple):
    """A job's reply: its text, what asking the model for it cost (`usage`, in whichever session asked; zero for a
    fixed reply, a refused prompt, or another job of the same sample), whether this session asked (`fresh`), and
    the provider's refusal when the text is the reference's placeholder for it."""

    text: str
    usage: Usage
    fresh: bool = False
    refusal: PromptRefusal | None = None

    @property
    def paid(self) -> Usage:
        """What this session paid for the reply."""
        return self.usage if self.fresh else Usage()


# Whose endpoint an `EndpointUnusable` is about, as the one line that stops a run says it.
MODEL, GRADER = "the model's", "the grader's"


class _Sampler:
    """Where each job's reply comes from: fixed, recorded by an earlier session, or asked of the policy (a
    prompt its provider refuses gets the reference's placeholder reply, graded once the refusals are known to be
    the exception: the guard has seen enough answers, or no call to the model is out that could add one)."""

    def __init__(self, jobs: Sequence[Job], store: Store, policy: Policy | None) -> None:
        self.store = store
        self.policy = policy
        asked = {(job.row.prompt_id, job.repeat) for job in jobs if job.reply is None}
        stored = sum(1 for prompt_id, repeat in asked if store.sample(prompt_id, repeat) is not None)
        self.guard = RefusalGuard(len(asked), answered=stored)
        self._asking: dict[tuple[str, int], asyncio.Future[Reply]] = {}
        self._out = 0  # calls to the model out now
        self._stopped_run = False
        self._decided = asyncio.Event()
        if self.guard.decided:  # enough answers kept by an earlier session
            self._decided.set()

    async def reply(self, job: Job) -> Reply:
        if job.reply is not None:
            return Reply(job.reply, Usage())
        key = (job.row.prompt_id, job.repeat)
        if key in self._asking:
            asked = await self._asking[key]
            return Reply(asked.text, Usage(), refusal=asked.refusal)  # counted once, by the first job of the sample
        asking = asyncio.ensure_future(self._ask(job))
        self._asking[key] = asking
        return await asking

    async def _ask(self, job: Job) -> Reply:
        recorded = self.store.sample(job.row.prompt_id, job.repeat)
        if recorded is not None:
            return Reply(*recorded)
        if self.policy is None:
            raise SampleError(job.row.prompt_id, "no reply given and no model to ask")
        self._out += 1
        try:
            reply, usage = await self.policy.sample(job.row.prompt, ident=f"{job.row.prompt_id}#{job.repeat}")
        except RequestFailed as exc:
            failure = exc
        except EndpointUnusable as exc:
            raise exc.of(MODEL) from None
        else:
            self.store.put_sample(job.row.prompt_id, job.repeat, reply, usage)
            self._guarded(self.guard.answer)
            return Reply(reply, usage, fresh=True)
        finally:
            self._out -= 1
            self._settle()
        refused = self._refused(job, failure)
        self._settle()
        # A placeholder is graded only once the guard has decided, so a run its refusals stop grades none of them.
        await self._decided.wait()
        return refused

    def _settle(self) -> None:
        if not self._stopped_run and (self.guard.decided or not self._out):
            self._decided.set()

    def _refused(self, job: Job, failure: RequestFailed) -> Reply:
        assert self.policy is not None
        if self.policy.config.policy_errors == "fail":
            raise SampleError(job.row.prompt_id, str(failure)) from None
        if (stop := misuse(failure, self.policy.config.base_url)) is not None:
            raise self._stopped(stop) from None
        refusal = prompt_refusal(failure)
        if refusal is None:
            raise SampleError(job.row.prompt_id, str(failure)) from None
        # Not stored: a later session asks again (a refused request costs nothing), and the record keeps the
        # provider's error only if it is seen again.
        self._guarded(lambda: self.guard.refuse(refusal))
        return Reply(REFUSED_REPLY, Usage(), refusal=refusal)

    def _guarded(self, count: Callable[[], None]) -> None:
        try:
            count()
        except PolicyMisuse as stop:
            raise self._stopped(stop) from None

    def _stopped(self, stop: PolicyMisuse) -> PolicyMisuse:
        """The run stops: the model is sent nothing more from now on (what is on the wire lands), though its
        other calls are cancelled only once this one's error reaches the run."""
        self._stopped_run = True
        if self.policy is not None and isinstance(self.policy.client, ApiClient):
            self.policy.client.halt()
        return stop


async def run_jobs(
    jobs: Sequence[Job],
    grader: Grader,
    store: Store,
    folder: RunFolder,
    *,
    policy: Policy | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    status: Callable[[Usage, Usage], str] | None = None,
    sample_first: bool = False,
    length_adjustment: LengthAdjustment | None = None,
) -> RunOutcome:
    """Sample (where a job has no fixed reply) and grade every job; write results.jsonl and metrics.json.

    Replies and verdicts come from `store` when it has them and go into it as they arrive, so a run
    resumed after a crash pays only for what it did not finish. results.jsonl is written afresh, one line
    per sample as it is graded. With `sample_first`, every reply is in before any grading starts, so a
    batching grader sees all its requests at once instead of a trickle. With `length_adjustment`, each
    line carries `length_adjusted_score` and the headline `score` of metrics.json is the adjusted one. A job
    with a transform is graded on its rewritten reply and its line names the transform (`transform`); metrics.json
    is of the jobs without one. `status` describes the pace and cost for the progress, from the usage so far
    (policy, grader).
    """
    outcome = RunOutcome(metrics=None)
    system_message = policy.config.system_message if policy else None
    sink: ResultSink[SampleRecord] = ResultSink(
        folder, len(jobs), outcome, unit="sample", progress=progress or Quiet(), status=status
    )
    sampler = _Sampler(jobs, store, policy)
    sampled: dict[int, Reply | SampleError | Deferred] = {}

    async def prefetch(index: int, job: Job) -> None:
        try:
            sampled[index] = await sampler.reply(job)
        except (SampleError, Deferred) as exc:
            sampled[index] = exc

    async def one(index: int, job: Job) -> None:
        try:
            got = sampled.pop(index, None)
            if isinstance(got, Exception):
                raise got
            reply = got if got is not None else await sampler.reply(job)
            outcome.policy_usage.add(reply.paid)
            text = reply.text if job.transform is None else job.transform.apply(reply.text, job.row)
            sample = await grade_sample(
                grader,
                job.row,
                text,
                repeat=job.repeat,
                system_message=system_message,
                adjustment=length_adjustment,
                transform=job.transform_name,
            )
        except EndpointUnusable as exc:
            raise exc if exc.role else exc.of(GRADER) from None
        except (SampleError, GradingError) as exc:
            sink.fail(exc, job.row.prompt_id, job.repeat, transform=job.transform_name)
            return
        except Deferred:
            sink.defer()
            return
        outcome.grader_usage.add(sample.paid)
        if reply.refusal is not None:
            outcome.refused += 1
        if sample.suspect and job.transform is None:
            outcome.suspect += 1
        # The line's usage is the sample's own, whichever session paid for it: the lines of a finished run add up
        # to usage.json's whole run.
        sink.add(
            SampleRecord.of(
                sample,
                policy_model=None if policy is None else policy.config.model,
                policy_usage=None if policy is None else reply.usage,
                policy_error=None if reply.refusal is None else PolicyErrorRecord.of(reply.refusal),
                transform=job.transform_name,
            )
        )

    # numpy, which only the metrics' bootstrap at the end needs, is imported in a thread while the first requests
    # are out and the loop mostly waits on them: the end of the run is spared the import (0.1-0.3 s).
    numpy = asyncio.get_running_loop().run_in_executor(None, importlib.import_module, "numpy")
    try:
        if sample_first:
            await all_or_none([prefetch(index, job) for index, job in enumerate(jobs)])
        await all_or_none([one(index, job) for index, job in enumerate(jobs)], at_once=_in_hand(grader, policy))
    finally:
        sink.close()
    if not outcome.failures and not outcome.deferred:
        await numpy
        own = [record for record in sink.records if record.transform is None]
        outcome.metrics = aggregate_samples(
            own, seed=seed, length_adjustment=length_adjustment, model_samples=policy is not None
        )
        folder.write_metrics(outcome.metrics)
    return outcome


def _in_hand(grader: Grader, policy: Policy | None) -> int | None:
    """How many samples a run has in hand at once: as many as its clients' budgets may ever have calls in flight (a
    sample makes one call at least), so that the calls of a sample are built when they can soon go, not all of a
    run's at its start, which kept the first request waiting about a second of CPU at 5,000 calls. None (all at
    once) where a client sends through the Batch API, which wants every request together."""
    clients = [grader.client, *([policy.client] if policy is not None else [])]
    ceilings = [client.ceiling for client in clients if isinstance(client, ApiClient)]
    return max(ceilings) if len(ceilings) == len(clients) else None


async def all_or_none(coroutines: Sequence[Coroutine[Any, Any, None]], at_once: int | None = None) -> None:
    """Run the coroutines together, at most `at_once` of them at a time if given; on `PolicyMisuse`,
    `EndpointUnusable` or `OutputUnusable` (a full disk) cancel the rest at once, so a run that cannot have a score
    stops in seconds instead of sending every request first (what has arrived is in the store already). Not a
    `TaskGroup`: any other failure (`QuotaExhausted`) is raised while the rest go on, so that what they have on the
    wire, already paid for, lands in the store (`session`)."""
    if at_once is not None and at_once < len(coroutines):
        room = asyncio.Semaphore(at_once)

        async def in_turn(coroutine: Coroutine[Any, Any, None]) -> None:
            try:
                async with room:
                    await coroutine
            finally:
                coroutine.close()  # cancelled before its turn: never started, and never to be

        coroutines = [in_turn(coroutine) for coroutine in coroutines]
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    try:
        await asyncio.gather(*tasks)
    except (PolicyMisuse, EndpointUnusable, OutputUnusable):
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
