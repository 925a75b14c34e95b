"""Running a meta-evaluation: the grader judges each meta-eval row once, and the agreement figures of
`grading.agreement` are written beside the results."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from healthbench.api.wire import Usage
from healthbench.data.schema import MetaRow
from healthbench.errors import Deferred, EndpointUnusable, MetaGradingError, RequestFailed
from healthbench.grading.agreement import meta_metrics
from healthbench.grading.grader import Grader
from healthbench.grading.prompt import grader_prompt, render_conversation, transcript_with_reply
from healthbench.runs.folder import AGREEMENT, RunFolder
from healthbench.runs.progress import Progress, Quiet
from healthbench.runs.records import MetaRecord, UsageNumbers
from healthbench.runs.runner import GRADER, ResultSink, RunOutcome, all_or_none


def write_meta_metrics(folder: RunFolder, records: Sequence[MetaRecord], *, seed: int) -> dict[str, float | int]:
    """Compute and write metrics.json and agreement.json; return the metrics."""
    metrics, agreement = meta_metrics(records, seed=seed)
    folder.write_agreement(agreement)
    folder.write_metrics(metrics)
    return metrics


async def grade_meta_rows(
    rows: Sequence[MetaRow],
    grader: Grader,
    folder: RunFolder,
    *,
    seed: int = 0,
    progress: Progress | None = None,
    status: Callable[[Usage, Usage], str] | None = None,
) -> RunOutcome:
    """Grade every row's completion against its criterion; write results.jsonl as rows finish, then the metrics.

    The grader sees the row's prompt and the completion as the assistant's turn, and the bare criterion as the
    rubric item. Verdicts come from the grader's cache when it has them, so a re-run asks nothing again. A row
    that cannot be graded is a failure of the run: no metrics are written; a grader endpoint that cannot be used
    stops the run at once (`EndpointUnusable`).
    """
    outcome = RunOutcome(metrics=None)
    sink: ResultSink[MetaRecord] = ResultSink(
        folder, len(rows), outcome, unit="row", progress=progress or Quiet(), status=status
    )
    folder.discard(AGREEMENT)

    async def one(index: int, row: MetaRow) -> None:
        conversation = render_conversation(transcript_with_reply(row.prompt, row.completion))
        try:
            verdict, usage = await grader.verdict(grader_prompt(conversation, row.rubric), ident=f"meta#{index}")
        except RequestFailed as exc:
            sink.fail(MetaGradingError(index, row.prompt_id, row.completion_id, row.rubric, str(exc)))
            return
        except Deferred:
            sink.defer()
            return
        except EndpointUnusable as exc:
            raise exc.of(GRADER) from None
        outcome.grader_usage.add(usage)
        record = MetaRecord(
            index=index,
            prompt_id=row.prompt_id,
            completion_id=row.completion_id,
            category=row.category,
            rubric=row.rubric,
            criteria_met=verdict.criteria_met,
            explanation=verdict.explanation,
            binary_labels=list(row.binary_labels),
            anonymized_physician_ids=list(row.anonymized_physician_ids),
            usage=UsageNumbers.of(usage),
            grader_model=grader.model,
        )
        sink.add(record)

    try:
        await all_or_none([one(index, row) for index, row in enumerate(rows)])
    finally:
        sink.close()
    if not outcome.failures and not outcome.deferred:
        outcome.metrics = write_meta_metrics(folder, sink.records, seed=seed)
    return outcome
