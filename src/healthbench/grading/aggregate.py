"""The metrics of a run from its samples' records, as metrics.json holds them: the reference's aggregate in a
fixed order (repeat, prompt_id), so the seeded bootstrap depends neither on which sample finished first nor on a
resume; the length-adjusted headline and worst-at-k when they apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from healthbench.errors import DataError
from healthbench.grading.scoring import (
    LENGTH_ADJUSTED,
    WORST_AT_K,
    LengthAdjustment,
    aggregate,
    worst_at_k,
)


def aggregate_records(
    records: Iterable[Mapping[str, Any]], *, seed: int, length_adjustment: LengthAdjustment | None = None
) -> dict[str, float | int]:
    """Metrics over result records, taken in (repeat, prompt_id) order so the bootstrap does not depend on
    which task finished first, nor on whether a run was resumed.

    With `length_adjustment`, each record's adjusted score is computed afresh from its `score` and
    `response` (so a run can be rescored with other settings), the metrics gain
    `overall_score_length_adjusted`, and `score` becomes that; every other metric is what it is without.
    With n >= 2 samples of every task from the evaluated model, the metrics gain `worst_at_k:K` for
    K = 1..n, of the headline task score (length-adjusted when `score` is).
    """
    ordered = sorted(records, key=lambda r: (r.get("repeat", 0), r["prompt_id"]))
    if length_adjustment is None:
        per_task = [r["metrics"] for r in ordered]
        metrics = aggregate(per_task, seed=seed)
    else:
        # Appended last to each task's metrics, with the sample count of overall_score (which every task
        # has), it draws no resamples of its own: every other metric keeps its values bit for bit.
        per_task = [r["metrics"] | {LENGTH_ADJUSTED: _length_adjusted(r, length_adjustment)} for r in ordered]
        metrics = aggregate(per_task, seed=seed, headline=LENGTH_ADJUSTED)
    headline = "overall_score" if length_adjustment is None else LENGTH_ADJUSTED
    return metrics | _worst_at_k(ordered, [m[headline] for m in per_task])


def _worst_at_k(ordered: Sequence[Mapping[str, Any]], headlines: Sequence[float]) -> dict[str, float | int]:
    """`worst_at_k:K` of the headline task scores, when the samples are the evaluated model's (records carry
    `policy_model`) and every task has the same number n >= 2 of them (`eval --n-repeats`); nothing
    otherwise. A baseline's repeats are different physicians' completions, not the same model asked again."""
    if not all("policy_model" in record for record in ordered):
        return {}
    by_task: dict[str, list[float]] = {}
    for record, value in zip(ordered, headlines, strict=True):
        by_task.setdefault(record["prompt_id"], []).append(value)
    counts = {len(scores) for scores in by_task.values()}
    if len(counts) != 1 or counts == {1}:
        return {}
    return {f"{WORST_AT_K}:{k}": value for k, value in worst_at_k(list(by_task.values())).items()}


def _length_adjusted(record: Mapping[str, Any], adjustment: LengthAdjustment) -> float:
    score, response = record.get("score"), record.get("response")
    where = f"result {record['prompt_id']!r} repeat {record.get('repeat', 0)}"
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise DataError(f"{where}: field score: expected a number to length-adjust, got {score!r}")
    if not isinstance(response, str):
        raise DataError(f"{where}: field response: expected the reply's text to measure, got {response!r}")
    return adjustment.adjust(float(score), response)
