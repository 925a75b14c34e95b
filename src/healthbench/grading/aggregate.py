"""The metrics of a run from its graded samples, as metrics.json holds them: the reference's aggregate in a fixed
order (repeat, prompt_id), so the seeded bootstrap depends neither on which sample finished first nor on a resume;
the length-adjusted headline and worst-at-k when they apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from healthbench.errors import DataError
from healthbench.grading.scoring import (
    LENGTH_ADJUSTED,
    WORST_AT_K,
    LengthAdjustment,
    aggregate,
    worst_at_k,
)


class Scored(Protocol):
    """A graded sample as the aggregate reads it (a results.jsonl record, say)."""

    @property
    def prompt_id(self) -> str: ...
    @property
    def repeat(self) -> int: ...
    @property
    def score(self) -> float: ...
    @property
    def metrics(self) -> Mapping[str, float]: ...
    @property
    def response(self) -> str | None: ...


def aggregate_samples(
    samples: Iterable[Scored],
    *,
    seed: int,
    length_adjustment: LengthAdjustment | None = None,
    model_samples: bool = False,
) -> dict[str, float | int]:
    """Metrics over graded samples, taken in (repeat, prompt_id) order so the bootstrap does not depend on
    which task finished first, nor on whether a run was resumed.

    With `length_adjustment`, each sample's adjusted score is computed afresh from its `score` and `response`
    (so a run can be rescored with other settings), the metrics gain `overall_score_length_adjusted`, and
    `score` becomes that; every other metric is what it is without. `model_samples` says the repeats are the
    evaluated model asked again (`eval`): with n >= 2 samples of every task, the metrics then gain
    `worst_at_k:K` for K = 1..n, of the headline task score (length-adjusted when `score` is).
    """
    ordered = sorted(samples, key=lambda s: (s.repeat, s.prompt_id))
    if length_adjustment is None:
        per_task = [dict(s.metrics) for s in ordered]
        metrics = aggregate(per_task, seed=seed)
    else:
        # Appended last to each task's metrics, with the sample count of overall_score (which every task
        # has), it draws no resamples of its own: every other metric keeps its values bit for bit.
        per_task = [dict(s.metrics) | {LENGTH_ADJUSTED: _length_adjusted(s, length_adjustment)} for s in ordered]
        metrics = aggregate(per_task, seed=seed, headline=LENGTH_ADJUSTED)
    if not model_samples:
        return metrics
    headline = "overall_score" if length_adjustment is None else LENGTH_ADJUSTED
    return metrics | _worst_at_k(ordered, [m[headline] for m in per_task])


def _worst_at_k(ordered: Sequence[Scored], headlines: Sequence[float]) -> dict[str, float | int]:
    """`worst_at_k:K` of the headline task scores when every task has the same number n >= 2 of samples
    (`eval --n-repeats`); nothing otherwise."""
    by_task: dict[str, list[float]] = {}
    for sample, value in zip(ordered, headlines, strict=True):
        by_task.setdefault(sample.prompt_id, []).append(value)
    counts = {len(scores) for scores in by_task.values()}
    if len(counts) != 1 or counts == {1}:
        return {}
    return {f"{WORST_AT_K}:{k}": value for k, value in worst_at_k(list(by_task.values())).items()}


def _length_adjusted(sample: Scored, adjustment: LengthAdjustment) -> float:
    if sample.response is None:
        where = f"result {sample.prompt_id!r} repeat {sample.repeat}"
        raise DataError(f"{where}: field response: expected the reply's text to measure, got None")
    return adjustment.adjust(sample.score, sample.response)
