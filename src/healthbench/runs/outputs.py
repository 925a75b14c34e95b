"""What commands write about runs, beside a run folder's own files, as typed, versioned records: `compare`'s result
(`Comparison`, what `compare --json` prints). Each is built by the code that computes it and read by its
consumers field by field; `version` says which shape a reader holds, and one this release does not know is
refused naming both (`records.Versioned`).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from healthbench.grading.grader import GraderCalls
from healthbench.runs.records import Record, Versioned
from healthbench.runs.spec import LengthSpec


class MetricDifference(Record):
    """One metric compared over the paired tasks where both runs have it: `n` tasks, each run's mean of its
    per-task means clipped to [0, 1] (`mean_a`, `mean_b`; unclipped beside them), `diff` the mean of the
    unclipped per-task differences B - A and [`ci_low`, `ci_high`] its 95% percentile bootstrap interval (tasks
    resampled), `clipped` whether clipping changed a mean, `marked` whether the interval excludes zero over at
    least the comparison's `min_marked` tasks."""

    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    mean_a_unclipped: float
    mean_b_unclipped: float
    clipped: bool
    marked: bool


class Headline(Record):
    """How one run scores its headline: length-adjusted or not, and with which settings (None: not recorded)."""

    length_adjusted: bool
    length_adjustment: LengthSpec | None = None


class Headlines(Record):
    """Each run's headline."""

    a: Headline
    b: Headline


class GraderCallsBySide(Record):
    """How each run's grader was called (None for a run without run.json)."""

    a: GraderCalls | None = None
    b: GraderCalls | None = None


class SampleCounts(Record):
    """Each run's samples of the paired tasks."""

    a: int
    b: int


class Comparison(Versioned):
    """`compare`'s result, B against A on the tasks both graded: the runs' names (their folders, None when not
    given), how each was graded and scored and sentences where they differ, `unfinished` a sentence per run that
    is not finished (compared on the tasks it graded), the paired tasks and those of one run only, the bootstrap's
    seed and resamples, and each metric's `MetricDifference` (the headline `score` first when either run is
    length-adjusted, then `overall_score`, the example-tag slices and the axes)."""

    FILE: ClassVar[str] = "compare's JSON"

    version: Literal[1] = 1
    a: str | None = None
    b: str | None = None
    grader_calls: GraderCallsBySide = Field(default_factory=GraderCallsBySide)
    grader_calls_mismatch: str | None = None
    unfinished: list[str] = Field(default_factory=list)
    n_tasks: int
    samples: SampleCounts
    only_a: int
    only_b: int
    seed: int
    n_bootstrap: int
    min_marked: int
    headline: Literal["score", "overall_score"]
    headlines: Headlines
    headline_mismatch: str | None = None
    metrics: dict[str, MetricDifference]
