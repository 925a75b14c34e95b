"""judges.json: several graders' meta-evaluations of the same physician-labelled rows, side by side.

`healthbench judges` runs each grader (in each grader-call mode asked) as `meta-eval` runs it, in a folder of its
own under the output folder, then writes this record beside them: for each, the grader's model, endpoint and call
mode, the figures its meta-eval wrote to metrics.json (under the same names), and what the side-by-side adds
(intervals, cost per 1,000 rewards, latency, failures), and which grader leads and whether the rows tell it apart
from the others. No key is ever part of it.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from healthbench.runs.records import Record, Versioned

# HealthBench's full set: 57,237 rubric items over 5,000 rows (docs/SPEC.md section 1), the verdicts one reward of
# it takes on average, graded per item.
ITEMS_PER_REWARD = 57_237 / 5_000

Interval = tuple[float, float]


class CategoryAgreement(Record):
    """The grader's macro F1 in one category of rows, with its seeded bootstrap interval (None where a resample
    leaves it undefined throughout), beside the physicians' pooled macro F1 there."""

    category: str
    rows: int
    macro_f1: float | None = None
    interval: Interval | None = None
    physicians_f1: float | None = None


class JudgeCost(Record):
    """What the grader's calls cost over the whole run (every session), and per 1,000 rewards at HealthBench's
    items per reward: tokens always, dollars where the model has a price (None: unpriced)."""

    verdicts: int
    calls: int
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None = None
    prompt_tokens_per_1000_rewards: float
    completion_tokens_per_1000_rewards: float
    usd_per_1000_rewards: float | None = None


class JudgeLatency(Record):
    """Seconds a grader request spent on the wire (request sent to answer read; a bad answer's retries added, no
    wait for a place in the budget or a backoff), over the requests timed (`n`; none for a batch run)."""

    n: int
    p50: float | None = None
    p95: float | None = None


class JudgeEntry(Record):
    """One grader in one call mode: where its meta-eval run is, how it was asked, and its figures.

    `metrics` is that run's metrics.json, key for key (None until every row is graded); `macro_f1` is its
    `pairwise_model_f1_balanced` with a seeded 95% bootstrap interval over completions, and `physicians_f1` the
    physicians' own (`pairwise_physician_f1_balanced`), the line to beat. `failed_rows` are rows the last session
    could not grade, `failure` what stopped the grader when its endpoint could not be used, `retried_answers`
    answers that held no usable verdict and were asked again."""

    name: str
    folder: str
    model: str
    base_url: str
    calls: Literal["per-item", "per-reply"]
    finished: bool
    rows: int
    completions: int = 0
    metrics: dict[str, float | int] | None = None
    macro_f1: float | None = None
    interval: Interval | None = None
    physicians_f1: float | None = None
    categories: list[CategoryAgreement] = Field(default_factory=list)
    cost: JudgeCost | None = None
    latency: JudgeLatency | None = None
    failed_rows: int = 0
    retried_answers: int = 0
    failure: str | None = None


class Difference(Record):
    """A grader's macro F1 less the leader's, on the same resamples (paired), with its 95% interval; `decided`
    when the interval leaves out zero (the rows tell the two apart)."""

    name: str
    difference: float
    interval: Interval | None = None
    decided: bool


class JudgesRecord(Versioned):
    """judges.json: the data graded, the bootstrap's seed and size, and every grader's entry in the order given;
    `leader` the finished grader of highest macro F1 and `differences` each other finished grader against it
    (empty when fewer than two finished or they graded different rows). Read and written by `runs.folder`, in
    the folder `healthbench judges` was given (--out)."""

    FILE: ClassVar[str] = "judges.json"

    version: Literal[1] = 1
    data: str
    data_sha256: str
    rows: int
    limit: int | None = None
    seed: int
    n_bootstrap: int
    confidence: float
    items_per_reward: float = ITEMS_PER_REWARD
    judges: list[JudgeEntry]
    leader: str | None = None
    differences: list[Difference] = Field(default_factory=list)

    @property
    def undecided(self) -> list[str]:
        """The graders the rows cannot tell apart from the leader."""
        return [difference.name for difference in self.differences if not difference.decided]
