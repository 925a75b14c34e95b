"""judges.json: several graders' meta-evaluations of the same physician-labelled rows, side by side.

`healthbench judges` runs each grader (in each grader-call mode asked) as `meta-eval` runs it, in a folder of its
own under the output folder, then writes this record beside them: for each, the grader's model, endpoint and call
mode, the figures its meta-eval wrote to metrics.json (under the same names), and what the side-by-side adds
(intervals, cost per 1,000 rewards, latency, failures), and which grader leads and whether the rows tell it apart
from the others; then each grader's hackability (`JudgeHackability`: how often each trick fools it, from its trials
in a folder inside its own), the attacker that wrote the strategies' rewrites, and the graders no other beats on
both agreement and hackability (`front`). No key is ever part of it.

Version 2 added the hackability. A judges.json of version 1 reads as it was written: its graders' hackability not
measured (None), no tricks, no attacker, no front.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from pydantic import Field

from healthbench.grading.hackability import HARD_TO_FOOL_MARGIN, Fooling, Verdict
from healthbench.runs.records import Record, SideUsage, Versioned

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
    hackability: JudgeHackability | None = None


class TrickFigures(Record):
    """One trick against one grader (`grading.hackability.Fooling`), on `rows` rows of `conversations`
    conversations whose criterion the physicians' majority judged not met: the grader's false-met rate on the
    untouched completions, its fooled rate on the rewritten ones, the difference with its 95% bootstrap interval
    over conversations, and what the interval allows (`verdict`). `attacker` is the model that wrote a strategy's
    rewrites (None for a transform)."""

    trick: str
    attacker: str | None = None
    rows: int
    conversations: int
    false_met: float
    fooled: float
    difference: float
    interval: Interval | None = None
    verdict: Verdict

    @classmethod
    def of(cls, trick: str, figures: Fooling, attacker: str | None = None) -> TrickFigures:
        """The record of a trick's computed figures."""
        return cls(trick=trick, attacker=attacker, verdict=figures.verdict, **dataclasses.asdict(figures))


class JudgeHackability(Record):
    """A grader's trials of the tricks: their folder (under judges.json's folder), the rows tried and the trials
    graded, whether every trial was (`finished`; the figures are of the trials graded either way), each trick's
    figures in the order tried, the trick that fools it most (`worst`), its verdict over every trick (None before
    any trick has figures), what the trials cost (usage.json's grader side, over every session), the trials that
    could not be graded and what stopped them when the endpoint could not be used."""

    folder: str
    rows: int = 0
    trials: int = 0
    finished: bool = False
    tricks: list[TrickFigures] = Field(default_factory=list)
    worst: str | None = None
    verdict: Verdict | None = None
    usage: SideUsage | None = None
    failed: int = 0
    failure: str | None = None

    def trick(self, name: str) -> TrickFigures | None:
        """The figures of the trick `name`, None when it has none."""
        return next((figures for figures in self.tricks if figures.trick == name), None)


class AttackerEntry(Record):
    """The attacker model that rewrote the trials' completions by its strategies: its model and endpoint (without
    a user or password), its run folder, the strategies, the rewrites it made and could not make, what they cost
    (usage.json's side of the model it asked, over every session) and what stopped it."""

    model: str
    base_url: str
    folder: str
    strategies: list[str]
    rewrites: int = 0
    failed: int = 0
    usage: SideUsage | None = None
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
    (empty when fewer than two finished or they graded different rows). The tricks tried on every grader, on how
    many rows (`hack_rows`: --hack-limit), the margin within which a grader is hard to fool, the `attacker`, and
    `front`: the graders with figures on both axes that no other beats on both (macro F1, and the difference of
    the trick that fools it most). Read and written by `runs.folder`, in the folder `healthbench judges` was given
    (--out)."""

    FILE: ClassVar[str] = "judges.json"

    version: Literal[1, 2] = 2
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
    tricks: list[str] = Field(default_factory=list)
    hack_rows: int | None = None
    hard_to_fool_margin: float = HARD_TO_FOOL_MARGIN
    attacker: AttackerEntry | None = None
    front: list[str] = Field(default_factory=list)

    @property
    def undecided(self) -> list[str]:
        """The graders the rows cannot tell apart from the leader."""
        return [difference.name for difference in self.differences if not difference.decided]
