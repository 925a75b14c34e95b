"""Running samples through the policy and the grader, and writing the results as they finish.

Every command that grades (`grade`, `eval`, `baseline`) is a list of jobs run here. Replies and verdicts
are kept in the run's store as they arrive, and `results.jsonl` gets one line per sample the moment it is
graded, so a crash loses at most what was in flight. Metrics are aggregated in a fixed order (repeat,
prompt_id), so the seeded bootstrap depends neither on which task finished first nor on a resume. If any
sample cannot be graded, no `metrics.json` is written: a partial score would be a wrong score.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from healthbench.api.wire import Usage
from healthbench.data.schema import Message, Row
from healthbench.errors import Deferred, GradingError, PolicyMisuse, RequestFailed, SampleError
from healthbench.grading.aggregate import aggregate_records
from healthbench.grading.grader import GradedReply, Grader
from healthbench.grading.prompt import transcript_with_reply
from healthbench.grading.scoring import (
    LengthAdjustment,
    task_metrics,
)
from healthbench.runs.folder import METRICS, RESULTS, write_json_atomic
from healthbench.runs.policy import REFUSED_REPLY, Policy, Refusal, RefusalGuard, misuse, prompt_refusal
from healthbench.runs.store import Store

T = TypeVar("T")


def result_record(
    row: Row, transcript: Sequence[Message], metrics: Mapping[str, float], graded: GradedReply, grader_model: str
) -> dict[str, Any]:
    """One results.jsonl line; `transcript` is the graded conversation, ending on the reply."""
    return {
        "prompt_id": row.prompt_id,
        "score": metrics["overall_score"],
        "response": transcript[-1].content,
        "prompt": [message.model_dump() for message in transcript[:-1]],
        "example_tags": list(row.example_tags),
        "metrics": dict(metrics),
        "rubric_items": [item.as_dict() for item in graded.items],
        "usage": graded.usage.as_dict(),
        "grader_model": grader_model,
    }


@dataclass(frozen=True)
class Job:
    """One sample to grade: a task, which repeat of it, and a fixed reply or None to ask the policy."""

    row: Row
    repeat: int = 0
    reply: str | None = None


@dataclass
class RunOutcome:
    """What a run produced: metrics only when every sample was graded; usage is what this session paid;
    `deferred` counts samples left waiting in batches for a later session."""

    metrics: dict[str, float | int] | None
    failures: list[Exception] = field(default_factory=list)
    deferred: int = 0
    policy_usage: Usage = field(default_factory=Usage)
    grader_usage: Usage = field(default_factory=Usage)
    done: int = 0
    refused: int = 0

    @property
    def summary_note(self) -> str:
        """What the summary line adds after the score: the samples graded with the refusal placeholder."""
        if not self.refused:
            return ""
        return f" ({self.refused} refused by the model and graded as the reply {REFUSED_REPLY!r})"


class ResultSink:
    """results.jsonl written afresh, a line per sample the moment it is done, with the progress bar and the
    run's counters; shared by every kind of run so they record and report progress alike."""

    def __init__(
        self,
        out_dir: Path,
        total: int,
        outcome: RunOutcome,
        *,
        unit: str,
        progress: bool,
        describe_cost: Callable[[Usage, Usage], str] | None,
    ) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / METRICS).unlink(missing_ok=True)
        self.records: list[dict[str, Any]] = []
        self._outcome = outcome
        self._describe_cost = describe_cost
        self._file = (out_dir / RESULTS).open("w", encoding="utf-8")
        self._bar = tqdm(total=total, unit=unit, desc="healthbench", disable=not progress or None)

    def add(self, record: dict[str, Any]) -> None:
        """Write one finished sample."""
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        self.records.append(record)
        self._outcome.done += 1
        self._bar.update()
        if self._describe_cost is not None:
            self._bar.set_postfix_str(
                self._describe_cost(self._outcome.policy_usage, self._outcome.grader_usage), refresh=False
            )

    def fail(self, error: Exception) -> None:
        """Count a sample that could not be done."""
        self._outcome.failures.append(error)
        self._bar.update()

    def defer(self) -> None:
        """Count a sample whose answer is still out in a batch."""
        self._outcome.deferred += 1

    def close(self) -> None:
        """Close the bar and the file."""
        self._bar.close()
        self._file.close()


async def run_jobs(
    jobs: Sequence[Job],
    grader: Grader,
    store: Store,
    out_dir: Path,
    *,
    policy: Policy | None = None,
    seed: int = 0,
    progress: bool = True,
    describe_cost: Callable[[Usage, Usage], str] | None = None,
    sample_first: bool = False,
    length_adjustment: LengthAdjustment | None = None,
) -> RunOutcome:
    """Sample (where a job has no fixed reply) and grade every job; write results.jsonl and metrics.json.

    Replies and verdicts come from `store` when it has them and go into it as they arrive, so a run
    resumed after a crash pays only for what it did not finish. results.jsonl is written afresh, one line
    per sample as it is graded. With `sample_first`, every reply is in before any grading starts, so a
    batching grader sees all its requests at once instead of a trickle. With `length_adjustment`, each
    line carries `length_adjusted_score` and the headline `score` of metrics.json is the adjusted one.
    """
    outcome = RunOutcome(metrics=None)
    system_message = policy.config.system_message if policy else None
    sink = ResultSink(out_dir, len(jobs), outcome, unit="sample", progress=progress, describe_cost=describe_cost)
    asked = [job for job in jobs if job.reply is None]
    stored = sum(1 for job in asked if store.sample(job.row.prompt_id, job.repeat) is not None)
    guard = RefusalGuard(len(asked), answered=stored)

    async def reply_for(job: Job) -> tuple[str, Usage, Refusal | None]:
        if job.reply is not None:
            return job.reply, Usage(), None
        recorded = store.sample(job.row.prompt_id, job.repeat)
        if recorded is not None:
            return recorded[0], Usage(), None
        if policy is None:
            raise SampleError(job.row.prompt_id, "no reply given and no model to ask")
        try:
            reply, usage = await policy.sample(job.row.prompt, ident=f"{job.row.prompt_id}#{job.repeat}")
        except RequestFailed as exc:
            if policy.config.policy_errors == "fail":
                raise SampleError(job.row.prompt_id, str(exc)) from None
            if (stop := misuse(exc, policy.config.base_url)) is not None:
                raise stop from None
            refusal = prompt_refusal(exc)
            if refusal is None:
                raise SampleError(job.row.prompt_id, str(exc)) from None
            # Not stored: a later session asks again (a refused request costs nothing), and the record
            # keeps the provider's error only if it is seen again.
            guard.refuse(refusal)
            return REFUSED_REPLY, Usage(), refusal
        store.put_sample(job.row.prompt_id, job.repeat, reply, usage)
        guard.answer()
        return reply, usage, None

    sampled: dict[int, tuple[str, Usage, Refusal | None] | SampleError | Deferred] = {}

    async def prefetch(index: int, job: Job) -> None:
        try:
            sampled[index] = await reply_for(job)
        except (SampleError, Deferred) as exc:
            sampled[index] = exc

    async def one(index: int, job: Job) -> None:
        try:
            got = sampled.pop(index, None)
            if isinstance(got, Exception):
                raise got
            reply, policy_usage, refusal = got if got is not None else await reply_for(job)
            outcome.policy_usage.add(policy_usage)
            transcript = transcript_with_reply(job.row.prompt, reply, system_message)
            ident = f"{job.row.prompt_id}#{job.repeat}"
            graded = await grader.grade(job.row.prompt_id, transcript, job.row.rubrics, ident=ident)
        except (SampleError, GradingError) as exc:
            sink.fail(exc)
            return
        except Deferred:
            sink.defer()
            return
        outcome.grader_usage.add(graded.usage)
        metrics = task_metrics(
            job.row.example_tags,
            [item.points for item in graded.items],
            [item.tags for item in graded.items],
            [item.criteria_met for item in graded.items],
        )
        record = result_record(job.row, transcript, metrics, graded, grader.model) | {"repeat": job.repeat}
        if length_adjustment is not None:
            record["length_adjusted_score"] = length_adjustment.adjust(metrics["overall_score"], reply)
        if policy is not None:
            record |= {"policy_model": policy.config.model, "policy_usage": policy_usage.as_dict()}
        if refusal is not None:
            record["policy_error"] = refusal.as_dict()
            outcome.refused += 1
        sink.add(record)

    try:
        if sample_first:
            await _all_or_none([prefetch(index, job) for index, job in enumerate(jobs)])
        await _all_or_none([one(index, job) for index, job in enumerate(jobs)])
    finally:
        sink.close()
    if not outcome.failures and not outcome.deferred:
        outcome.metrics = aggregate_records(sink.records, seed=seed, length_adjustment=length_adjustment)
        write_json_atomic(out_dir / METRICS, outcome.metrics)
    return outcome


async def _all_or_none(coroutines: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run the coroutines together; on `PolicyMisuse` cancel the rest at once, so a run that cannot have a
    score stops in seconds instead of sending every request first."""
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    try:
        await asyncio.gather(*tasks)
    except PolicyMisuse:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
