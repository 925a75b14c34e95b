"""What the Inspect task and the verifiers taskset share: the rows they serve, one grader per process, and the
reference's metrics.

Neither framework is imported here, so both adapters (`inspect_task`, `verifiers_env`) stay thin and grade
exactly as `healthbench grade` does: the same rows (`limit` sampled as the reference samples), the same grader
settings (`grading.settings.GradingOptions`, for what the rows are: a file in HealthBench Professional's schema
gets its official settings as the `professional` subset does), the same graded sample
(`grading.sample.grade_sample`). A reply that cannot be graded raises `GradingError`; nothing here turns it
into a score. What a user should know (a file recognised as Professional's, a `limit` past the rows) is logged
as a warning, which both frameworks show.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

from healthbench.data.schema import Row
from healthbench.data.select import select_rows
from healthbench.data.source import TaskSource
from healthbench.data.subsets import PROFESSIONAL
from healthbench.data.tags import breakdown
from healthbench.errors import DownloadFailed, SettingsError
from healthbench.grading.bootstrap import Seed
from healthbench.integrations.pool import GraderPool
from healthbench.runs.spec import Limit, Repeats

logger = logging.getLogger(__name__)


class Tasks(NamedTuple):
    """The rows to evaluate, and their kind: the subset whose official settings apply (`professional` for a
    file in its schema too; None for another file), which the grader settings and the length adjustment take."""

    rows: list[Row]
    kind: str | None


class Size(BaseModel):
    """How many tasks, how often each is sampled, and the bootstrap's seed: the commands' ranges, which the
    Inspect task's and the verifiers taskset's arguments take too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    limit: Limit | None = None
    n_repeats: Repeats = 1
    seed: Seed = 0


def sized(**values: Any) -> Size:
    """`Size` of the values given; `SettingsError` naming each one out of range."""
    try:
        return Size(**values)
    except ValidationError as exc:
        said = "; ".join(f"`{error['loc'][0]}` is {error['input']!r}: {error['msg']}" for error in exc.errors())
        raise SettingsError(said) from None


def load_tasks(
    subset: str | None = None,
    data: str | Path | None = None,
    limit: int | None = None,
    *,
    split: str | None = None,
    heldout: str | Path | None = None,
    split_seed: int = 0,
) -> Tasks:
    """The rows to evaluate: `data` (a file in either task schema; a subset's name or `subset:NAME` as a string),
    else a named subset (default `full`); with `split`, the rows of that training split (`data.splits`: `heldout`
    is the official hard file for the full set, or the rows of the file `heldout` for `data`, else a seeded 20%;
    `split_seed` seeds the choice), as `TaskSource.chosen` reads these settings; `limit` of them chosen as the
    reference chooses (`random.Random(0).sample`)."""
    if limit is not None:
        sized(limit=limit)
    return source_tasks(TaskSource.chosen(data, subset, split=split, heldout=heldout, seed=split_seed), limit)


def source_tasks(source: TaskSource, limit: int | None = None) -> Tasks:
    """The rows of `source` (see `load_tasks`), a file recognised as Professional's said as a warning."""
    if source.professional_file:
        logger.warning(
            "%s is in HealthBench Professional's schema, so it is graded as subset=professional is (its official "
            "grader and length adjustment, unless grading settings say otherwise)",
            source.path,
        )
    try:
        rows = source.rows()
    except DownloadFailed as exc:
        raise exc.offering("pass data=PATH") from None
    if limit is not None and limit > len(rows):
        logger.warning("limit=%d is more than the %d tasks in the data; running all %d", limit, len(rows), len(rows))
    return Tasks(select_rows(rows, limit), source.kind)


def slice_prefixes(subset: str | None) -> tuple[str, ...]:
    """The tag prefixes a subset's metrics are broken down by: Professional's slices, or themes and axes."""
    return tuple(f"{name}:" for name in breakdown(subset == PROFESSIONAL))


# One grader per distinct settings in each event loop, so every sample draws on its one concurrency budget and its
# client's rate pacing, kept warm between samples; Inspect and verifiers run evals in loops that come and go, and a
# loop's graders close as it ends (nor is one ever used from another loop), so nothing outlives an eval's loop.
GRADERS = GraderPool()
