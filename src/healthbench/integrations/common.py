"""What the Inspect task and the verifiers taskset share: their arguments, one grader per process, one graded
sample.

Neither framework is imported here, so both adapters (`inspect_task`, `verifiers_env`) stay thin and grade
exactly as `healthbench grade` does: the same rows (`limit` sampled as the reference samples), the same
grader settings (the HEALTHBENCH_GRADER_* environment, HealthBench Professional's official defaults), the
same transcript, task metrics and length adjustment. A reply that cannot be graded raises `GradingError`;
nothing here turns it into a score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from healthbench.data.loading import load_rows
from healthbench.data.schema import Row
from healthbench.data.select import select_rows
from healthbench.data.subsets import PROFESSIONAL, load_subset
from healthbench.errors import DataError
from healthbench.grading.aggregate import aggregate_records
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig, GraderPool, length_adjustment_for

# The slices the metrics are reported by: themes and axes for HealthBench, the four row slices for Professional.
HEALTHBENCH_SLICES = ("theme:", "axis:")
PROFESSIONAL_SLICES = ("use_case:", "type:", "difficulty:", "specialty:")


def load_tasks(subset: str | None = None, data: str | Path | None = None, limit: int | None = None) -> list[Row]:
    """The rows to evaluate: a file in the official schema, else a named subset (default `full`); `limit`
    of them chosen as the reference chooses (`random.Random(0).sample`)."""
    if data is not None and subset is not None:
        raise DataError(f"give a data file or a subset, not both (data={str(data)!r}, subset={subset!r})")
    if limit is not None and limit < 1:
        raise DataError(f"limit must be at least 1, not {limit}")
    rows = load_rows(data) if data is not None else load_subset(subset or "full")
    return select_rows(rows, limit)


def grader_config(
    subset: str | None = None,
    *,
    model: str | None = None,
    base_url: str | None = None,
    api: str | None = None,
    reasoning_effort: str | None = None,
    reasoning: bool | None = None,
    max_output_tokens: int | None = None,
    concurrency: int | None = None,
    max_attempts: int | None = None,
) -> GraderConfig:
    """Grader settings as every grading command takes them: explicit values, then the grader's environment
    (never `OPENAI_BASE_URL`), then the subset's official settings (Professional), then the reference's."""
    return GraderConfig.for_subset(
        subset,
        model=model,
        base_url=base_url,
        api=api,
        reasoning_effort=reasoning_effort,
        reasoning=reasoning,
        max_output_tokens=max_output_tokens,
        concurrency=concurrency,
        max_attempts=max_attempts,
    )


def length_adjustment(
    subset: str | None, center: float | None = None, penalty_per_500_chars: float | None = None
) -> LengthAdjustment | None:
    """Both settings or neither; with neither, Professional's official adjustment and none for the others."""
    return length_adjustment_for(subset, center, penalty_per_500_chars)


def slices_for(subset: str | None) -> tuple[str, ...]:
    """The tag prefixes a subset's metrics are broken down by."""
    return PROFESSIONAL_SLICES if subset == PROFESSIONAL else HEALTHBENCH_SLICES


# One grader per distinct settings for the whole process, so every sample draws on its one concurrency budget
# and its client's rate pacing; its HTTP session closes whenever no sample is grading, so nothing outlives an
# eval's event loop.
GRADERS = GraderPool()


def reference_metrics(
    records: Sequence[Mapping[str, Any]], *, seed: int = 0, adjustment: LengthAdjustment | None = None
) -> dict[str, float | int]:
    """The reference's metrics over sample records, exactly as `healthbench grade` writes metrics.json."""
    return aggregate_records(records, seed=seed, length_adjustment=adjustment)
