"""What the Inspect task and the verifiers taskset share: the rows they serve, one grader per process, and the
reference's metrics.

Neither framework is imported here, so both adapters (`inspect_task`, `verifiers_env`) stay thin and grade
exactly as `healthbench grade` does: the same rows (`limit` sampled as the reference samples), the same grader
settings (`grading.settings.GradingOptions`), the same graded sample (`grading.sample.grade_sample`). A reply
that cannot be graded raises `GradingError`; nothing here turns it into a score.
"""

from __future__ import annotations

from pathlib import Path

from healthbench.data.loading import load_rows
from healthbench.data.schema import Row
from healthbench.data.select import select_rows
from healthbench.data.subsets import PROFESSIONAL, load_subset
from healthbench.data.tags import breakdown
from healthbench.errors import DataError
from healthbench.grading.settings import GraderPool


def load_tasks(subset: str | None = None, data: str | Path | None = None, limit: int | None = None) -> list[Row]:
    """The rows to evaluate: a file in the official schema, else a named subset (default `full`); `limit`
    of them chosen as the reference chooses (`random.Random(0).sample`)."""
    if data is not None and subset is not None:
        raise DataError(f"give a data file or a subset, not both (data={str(data)!r}, subset={subset!r})")
    if limit is not None and limit < 1:
        raise DataError(f"limit must be at least 1, not {limit}")
    rows = load_rows(data) if data is not None else load_subset(subset or "full")
    return select_rows(rows, limit)


def slice_prefixes(subset: str | None) -> tuple[str, ...]:
    """The tag prefixes a subset's metrics are broken down by: Professional's slices, or themes and axes."""
    return tuple(f"{name}:" for name in breakdown(subset == PROFESSIONAL))


# One grader per distinct settings for the whole process, so every sample draws on its one concurrency budget
# and its client's rate pacing; its HTTP session closes whenever no sample is grading, so nothing outlives an
# eval's event loop.
GRADERS = GraderPool()
