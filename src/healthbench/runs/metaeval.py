"""Meta-evaluation (SPEC section 5): how well a grader agrees with physicians, measured as OpenAI's reference does.

A meta-eval row is one completion, one consensus criterion and the binary labels of several physicians. The
grader judges each row once, with the bare criterion text as the rubric item. Every (row, physician label) pair
is then one prediction (the grader's verdict) against one truth (the label), pooled over all rows and within each
category. Key names, formulas and edge cases are those of `healthbench_meta_eval.py` in openai/simple-evals,
down to how it derives F1 and balanced keys by substring replacement (so a category whose name contains
"precision" gets no F1 figures, and one containing "pos" no balanced ones). The physician baseline is the same
computation with each physician in turn as the rater and the other physicians of the row as truth; a row with a
single label gives no pairs. The metric functions are pure; `grade_meta_rows` runs a meta-eval and writes its
files.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from healthbench.api.wire import Usage
from healthbench.data.schema import MetaRow
from healthbench.errors import Deferred, MetaGradingError, RequestFailed
from healthbench.grading.agreement import meta_metrics
from healthbench.grading.grader import Grader
from healthbench.grading.prompt import grader_prompt, render_conversation, transcript_with_reply
from healthbench.runs.folder import METRICS, write_json_atomic
from healthbench.runs.runner import ResultSink, RunOutcome

AGREEMENT = "agreement.json"


"""Label pairs by (group, the rater's label, the truth label)."""


def write_meta_metrics(out_dir: Path, records: Sequence[Mapping[str, Any]], *, seed: int) -> dict[str, float | int]:
    """Compute and write metrics.json and agreement.json; return the metrics."""
    metrics, agreement = meta_metrics(records, seed=seed)
    write_json_atomic(out_dir / AGREEMENT, agreement)
    write_json_atomic(out_dir / METRICS, metrics)
    return metrics


async def grade_meta_rows(
    rows: Sequence[MetaRow],
    grader: Grader,
    out_dir: Path,
    *,
    seed: int = 0,
    progress: bool = True,
    describe_cost: Callable[[Usage, Usage], str] | None = None,
) -> RunOutcome:
    """Grade every row's completion against its criterion; write results.jsonl as rows finish, then the metrics.

    The grader sees the row's prompt and the completion as the assistant's turn, and the bare criterion as the
    rubric item. Verdicts come from the grader's cache when it has them, so a re-run asks nothing again. A row
    that cannot be graded is a failure of the run: no metrics are written.
    """
    outcome = RunOutcome(metrics=None)
    sink = ResultSink(out_dir, len(rows), outcome, unit="row", progress=progress, describe_cost=describe_cost)
    (out_dir / AGREEMENT).unlink(missing_ok=True)

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
        outcome.grader_usage.add(usage)
        record = {
            "index": index,
            "prompt_id": row.prompt_id,
            "completion_id": row.completion_id,
            "category": row.category,
            "rubric": row.rubric,
            "criteria_met": verdict.criteria_met,
            "explanation": verdict.explanation,
            "binary_labels": list(row.binary_labels),
            "anonymized_physician_ids": list(row.anonymized_physician_ids),
            "usage": usage.as_dict(),
            "grader_model": grader.model,
        }
        sink.add(record)

    try:
        await asyncio.gather(*(one(index, row) for index, row in enumerate(rows)))
    finally:
        sink.close()
    if not outcome.failures and not outcome.deferred:
        outcome.metrics = write_meta_metrics(out_dir, sink.records, seed=seed)
    return outcome
