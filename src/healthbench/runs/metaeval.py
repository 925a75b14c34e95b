"""Running a meta-evaluation: the grader judges each meta-eval row once, and the agreement figures of
`grading.agreement` are written beside the results.

A meta-eval row is one criterion of one completion. Graded per item (the reference's way), each row is a call.
Graded per reply, the rows of one completion (same prompt and completion, so the same reply) are its rubric:
one call judges them all, as `--grader-calls per-reply` judges a reply's rubric in `grade`; so the agreement
measured is that of the mode as it grades. Each row still gets its own verdict and its own line."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from healthbench.api.wire import Usage
from healthbench.data.schema import MetaRow
from healthbench.errors import Deferred, EndpointUnusable, MetaGradingError, RequestFailed
from healthbench.grading.agreement import meta_metrics
from healthbench.grading.grader import Grader
from healthbench.grading.per_reply import per_reply_prompt, reply_verdicts
from healthbench.grading.prompt import grader_prompt, render_conversation, transcript_with_reply
from healthbench.grading.verdict import Answer
from healthbench.runs.folder import AGREEMENT, RunFolder
from healthbench.runs.progress import Progress, Quiet
from healthbench.runs.records import AgreementRecord, MetaRecord, UsageNumbers
from healthbench.runs.runner import GRADER, RecordT, ResultSink, RunOutcome, all_or_none

# What a row's record keeps of the row as read: every field the two share by name (not the prompt and the
# completion, which the data holds).
_ROW_FIELDS = set(MetaRow.model_fields) & set(MetaRecord.model_fields)


def write_meta_metrics(folder: RunFolder, records: Sequence[MetaRecord], *, seed: int) -> dict[str, float | int]:
    """Compute and write metrics.json and agreement.json; return the metrics."""
    metrics, agreement = meta_metrics(records, seed=seed)
    folder.write(AgreementRecord.model_validate(agreement))
    folder.write_metrics(metrics)
    return metrics


def completion_groups(rows: Sequence[MetaRow]) -> list[list[int]]:
    """The indices of the rows of each completion (same prompt_id, completion_id, prompt and completion), in the
    order their first rows come, each group in row order: the rubric a per-reply call judges at once."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for index, row in enumerate(rows):
        conversation = render_conversation(transcript_with_reply(row.prompt, row.completion))
        groups.setdefault((row.prompt_id, row.completion_id, conversation), []).append(index)
    return list(groups.values())


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
    rubric item; a per-reply grader sees all the criteria of one completion in one call. Verdicts come from the
    grader's cache when it has them, so a re-run asks nothing again. A row that cannot be graded is a failure of
    the run: no metrics are written; a grader endpoint that cannot be used stops the run at once
    (`EndpointUnusable`).
    """
    outcome = RunOutcome(metrics=None)
    sink: ResultSink[MetaRecord] = ResultSink(
        folder, len(rows), outcome, unit="row", progress=progress or Quiet(), status=status
    )
    folder.discard(AGREEMENT)

    def record(index: int, answer: Answer) -> MetaRecord:
        return meta_record(rows[index], index, answer, grader.model)

    try:
        await judge_rows(rows, grader, sink, outcome, record)
    finally:
        sink.close()
    if not outcome.failures and not outcome.deferred:
        outcome.metrics = write_meta_metrics(folder, sink.records, seed=seed)
    return outcome


def meta_record(row: MetaRow, index: int, answer: Answer, grader_model: str) -> MetaRecord:
    """The record of a row as graded: the row's fields, the verdict, and the call's usage and seconds on the
    wire (the row's own, whichever session asked)."""
    return MetaRecord(
        index=index,
        **row.model_dump(include=_ROW_FIELDS),
        criteria_met=answer.verdict.criteria_met,
        explanation=answer.verdict.explanation,
        usage=UsageNumbers.of(answer.usage),
        grader_model=grader_model,
        seconds=answer.usage.wire_microseconds / 1_000_000 if answer.usage.wire_microseconds else None,
    )


async def judge_rows(
    rows: Sequence[MetaRow],
    grader: Grader,
    sink: ResultSink[RecordT],
    outcome: RunOutcome,
    record: Callable[[int, Answer], RecordT],
    *,
    ident: Callable[[int], str] = "meta#{}".format,
    number: Callable[[int], int] = int,
    trick: Callable[[int], str | None] = lambda index: None,
) -> None:
    """Judge every row's completion against its criterion, as a meta-eval does (per item, or the rows of one
    completion in one call per reply), and add `record(index, answer)` to `sink` for each; a row that cannot be
    graded is a failure in `sink` (a `MetaGradingError` naming the row as `number(index)`, and the `trick` its
    completion was rewritten by, if any), a row left in a batch deferred, and a grader endpoint that cannot be used
    stops everything (`EndpointUnusable`). `ident(index)` names a call by its first row."""

    async def judged(group: list[int]) -> None:
        first = rows[group[0]]
        conversation = render_conversation(transcript_with_reply(first.prompt, first.completion))
        try:
            if grader.calls == "per-reply":
                prompt = per_reply_prompt(conversation, [rows[index].rubric for index in group])
                cache_key = grader.cache_key(render_conversation(first.prompt))
                results = await reply_verdicts(grader, prompt, len(group), ident=ident(group[0]), cache_key=cache_key)
            else:
                prompt, cache_key = grader_prompt(conversation, first.rubric), grader.cache_key(conversation)
                affinity = grader.affinity(conversation)
                results = [await grader.verdict(prompt, ident=ident(group[0]), cache_key=cache_key, affinity=affinity)]
        except RequestFailed as exc:
            for index in group:
                row = rows[index]
                cause, lasts = grader.failure(exc), exc.lasting
                failure = MetaGradingError(
                    number(index),
                    row.prompt_id,
                    row.completion_id,
                    row.rubric,
                    cause,
                    lasting=lasts,
                    trick=trick(index),
                )
                sink.fail(failure, row.prompt_id, transform=trick(index))
            return
        except Deferred:
            for _ in group:
                sink.defer()
            return
        except EndpointUnusable as exc:
            raise exc.of(GRADER) from None
        for index, answer in zip(group, results, strict=True):
            outcome.grader_usage.add(answer.paid)
            sink.add(record(index, answer))

    # Per item, every row is a group of its own (its own call, under its own ident as before).
    groups = completion_groups(rows) if grader.calls == "per-reply" else [[index] for index in range(len(rows))]
    await all_or_none([judged(group) for group in groups])
