"""What commands write about runs, beside a run folder's own files, as typed, versioned records: `compare`'s
result (`Comparison`, what `compare --json` prints; `MetaComparison` for meta-eval runs), the leaderboard
(`Leaderboard`, its rows `LeaderboardRow`), the dry run's estimate (`DryRunEstimate`), the metadata `serve`
returns beside a reward (`RewardMetadata`), and `serve`'s batch routes' bodies (`RewardsRequest` and
`RewardsAnswer` for `/rewards`, which its server and its clients share; `OpenRLHFAnswer`). Each is built by the
code that computes it and read by its consumers field by field; `version` says which shape a reader holds, and one
this release does not know is refused naming both (`records.Versioned`); the shapes `serve` answers with keep the
keys clients have always read, without a `version`.
"""

from __future__ import annotations

from typing import ClassVar, Generic, Literal, Protocol, TypeVar

from pydantic import Field, JsonValue

from healthbench.grading.grader import GradedItem, GraderCalls
from healthbench.runs.records import Record, SideUsage, TokenCounts, Versioned
from healthbench.runs.spec import Command, GraderRequest, LengthSpec

SideT = TypeVar("SideT")


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


class BySide(Record, Generic[SideT]):
    """One value for each run of a comparison, A's and B's: each run's headline, how its grader was called (None
    for a run without run.json), its samples of the paired tasks."""

    a: SideT
    b: SideT


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
    grader_calls: BySide[GraderCalls | None] = Field(default_factory=lambda: BySide[GraderCalls | None](a=None, b=None))
    grader_calls_mismatch: str | None = None
    unfinished: list[str] = Field(default_factory=list)
    n_tasks: int
    samples: BySide[int]
    only_a: int
    only_b: int
    seed: int
    n_bootstrap: int
    min_marked: int
    headline: Literal["score", "overall_score"]
    headlines: BySide[Headline]
    headline_mismatch: str | None = None
    metrics: dict[str, MetricDifference]


class Spread(Protocol):
    """A figure's spread: metrics.json's bootstrap std and sample count and the 95% interval [`ci_low`, `ci_high`],
    each None where not known. `FigureRecord` and `LeaderboardRow` hold one each, in JSON orders of their own that
    readers have always had (so a protocol, not a base class, whose fields would come first)."""

    @property
    def bootstrap_std(self) -> float | None: ...

    @property
    def n_samples(self) -> int | None: ...

    @property
    def ci_low(self) -> float | None: ...

    @property
    def ci_high(self) -> float | None: ...


def interval_of(spread: Spread) -> tuple[float, float] | None:
    """The spread's 95% interval; None when either end is not known."""
    if spread.ci_low is None or spread.ci_high is None:
        return None
    return spread.ci_low, spread.ci_high


class FigureRecord(Record):
    """One clipped mean of metrics.json with its spread (`Spread`): its bootstrap std and sample count, and its
    95% interval (None where not known)."""

    value: float
    bootstrap_std: float | None = None
    n_samples: int | None = None
    ci_low: float | None = None
    ci_high: float | None = None


class MarkRecord(Record):
    """How one run's setting differs from the other runs'."""

    kind: str
    detail: str


class LeaderboardRow(Record):
    """One run on the leaderboard: its rank among the runs on its task set (`task_set`; runs on other tasks are
    ranked apart), what was graded and by which grader, its data, its headline `score` (metrics.json's) with
    metrics.json's `bootstrap_std` and `n_samples` and the 95% interval [`ci_low`, `ci_high`] of a percentile
    bootstrap over its `n_tasks` tasks (each task's samples averaged, tasks resampled, as `compare` does): the
    headline's `Spread`; its cost, its marks, and its slices as metrics.json has them (interval: score ± 1.96
    bootstrap std)."""

    rank: int
    run: str
    command: Command
    model: str
    grader_model: str
    grader_request: GraderRequest | None = None
    grader_calls: GraderCalls = "per-item"
    grader: str
    subset: str
    data: str
    data_sha256: str | None = None
    split: str | None = None  # the training split graded, None for every task of the data
    task_set: str
    n_tasks: int
    headline: str
    length_adjustment: LengthSpec | None = None
    score: float
    bootstrap_std: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_samples: int | None = None
    official_configuration: bool | None = None
    official_differences: list[str] = Field(default_factory=list)
    cost_usd: float | None = None
    grader_cache_hit_rate: float | None = None
    grader_cache_saved_usd: float | None = None
    cost: str
    marks: list[MarkRecord] = Field(default_factory=list)
    metrics: dict[str, FigureRecord] = Field(default_factory=dict)


class Leaderboard(Versioned):
    """The leaderboard (`leaderboard --json`): its rows, runs on one task set together and ranked among
    themselves (best first), the slice names per family over all runs, a sentence per setting that differs
    across runs, and the page written (None until it is)."""

    FILE: ClassVar[str] = "the leaderboard's JSON"

    version: Literal[1] = 1
    runs: list[LeaderboardRow]
    families: dict[str, list[str]] = Field(default_factory=dict)
    differences: list[str] = Field(default_factory=list)
    page: str | None = None


class SideEstimate(TokenCounts):
    """One side's (policy or grader) expected calls and tokens in a dry run, its model and endpoint, and its cost
    live and in batch (None where the model has no price)."""

    model: str
    cost_usd: float | None = None
    batch_cost_usd: float | None = None
    base_url: str | None = None


class PromptCacheEstimate(Record):
    """The prompt cache hit rate a dry run assumes, by which rule, and what it takes off the live cost."""

    prompt_cache_key: bool
    assumed_hit_rate: float
    rule: str
    saved_usd: float | None = None


class GraderEstimate(SideEstimate):
    """The grader's side of a dry run, with how it is called and the prompt cache it assumes."""

    grader_calls: GraderCalls = "per-item"
    prompt_cache: PromptCacheEstimate | None = None


class CostTotals(Record):
    """Both sides' cost live and in batch; None when a side has no price (never a total that hides a side)."""

    live: float | None = None
    batch: float | None = None


class KeyPace(Record):
    """The least wall time of one key's calls under its rate limits (None: no limit known, so none assumed),
    which limit binds, the limits reckoned with and where they come from, and the key's endpoint."""

    seconds: float | None = None
    binding: Literal["RPM", "TPM"] | None = None
    rpm: float | None = None
    tpm: float | None = None
    limits: str
    base_url: str | None = None


class WallTime(Record):
    """A dry run's least wall time: the slowest key's (keys run side by side; None when no key has a limit
    known), and each key's, named by the sides that use it ("grader", "policy", "grader+policy")."""

    seconds: float | None = None
    keys: dict[str, KeyPace] = Field(default_factory=dict)


class DryRunEstimate(Versioned):
    """What `--dry-run` says before anything is sent (`--json` prints it): the samples (and tasks, where the
    command counts them), each side's calls, tokens and cost, the total cost, and the least wall time."""

    FILE: ClassVar[str] = "the dry run's JSON"

    version: Literal[1] = 1
    tasks: int | None = None
    samples: int
    policy: SideEstimate | None = None
    grader: GraderEstimate
    total_cost_usd: CostTotals
    wall_time: WallTime


class RewardItem(Record):
    """One rubric item's verdict as `serve` returns it beside a reward: a `GradedItem` without its criterion (the
    rubric stays on the server) and with its explanation cut short, in the key order clients have always read."""

    criteria_met: bool
    points: int
    tags: list[str] = Field(default_factory=list)
    explanation: str = ""

    @classmethod
    def of(cls, item: GradedItem, explanation_chars: int) -> RewardItem:
        """The verdict of `item`, its explanation cut to `explanation_chars`."""
        return cls(
            criteria_met=item.criteria_met,
            points=item.points,
            tags=list(item.tags),
            explanation=item.explanation[:explanation_chars],
        )


class RewardMetadata(Record):
    """What `serve` returns beside a graded reply's reward (the tool output's metadata): every verdict, the task's
    metrics, both scores, how the grader was asked and how often (`per-reply` is not the official grading), the
    calls' usage, and `suspect`: the rules of `grading.suspect` the reply trips, which a trainer may penalise.
    Its keys are what clients of `serve` have always read, so it carries no `version` key of its own; numbers
    keep the type they were given (a center of 2000 stays 2000, not 2000.0)."""

    prompt_id: str
    items: list[RewardItem]
    metrics: dict[str, float]
    score: float
    length_adjusted_score: float | None = None
    length_adjustment: dict[str, int | float] | None = None
    grader_model: str
    grader_request: GraderRequest
    template_sha256: str
    grader_calls: GraderCalls
    per_reply_template_sha256: str | None = None
    usage: dict[str, int]
    suspect: list[str] = Field(default_factory=list)


class MetaRunFigures(Record):
    """One finished meta-eval run as `compare` sets it beside another: its folder, grader and how it was called,
    macro F1 with its 95% interval (completions resampled; None where undefined), rows and completions, and the
    grader's calls, tokens and cost."""

    folder: str
    grader_model: str
    grader_calls: GraderCalls
    macro_f1: float | None = None
    interval: tuple[float, float] | None = None
    rows: int
    completions: int
    usage: SideUsage


class MetaComparison(Versioned):
    """`compare` of meta-eval runs (what `--json` prints for them): each run's figures, B - A's macro F1 with its
    paired interval when the first two graded the same rows (`paired`), and the paper's figures beside them."""

    FILE: ClassVar[str] = "compare's JSON"

    version: Literal[1] = 1
    runs: list[MetaRunFigures]
    difference: float | None = None
    difference_interval: tuple[float, float] | None = None
    paired: bool = False
    paper_macro_f1: dict[str, float] = Field(default_factory=dict)


class ReplyItem(Record):
    """One reply of a `/rewards` request: the task's prompt_id and the reply (its text; a conversation's messages
    are taken too, as TRL's reward takes them). Anything JSON holds is read, so that what is not a reply is refused
    as every reward path refuses it."""

    prompt_id: str
    reply: JsonValue


class RewardsRequest(Record):
    """`serve`'s `POST /rewards` body: the split the prompt_ids are in (None: `train` when served, else `test`) and
    the step's replies. TRL's server mode sends it; `serve` reads it."""

    split: str | None = None
    items: list[ReplyItem]


class RewardResult(Record):
    """One reply's result in `/rewards`' answer, in the items' order: its task, its reward (the signed task score;
    None for a reply that could not be graded, with the `error` naming task and item) and its per-axis scores."""

    prompt_id: str
    reward: float | None = None
    error: str | None = None
    axes: dict[str, float] = Field(default_factory=dict)


class RewardsAnswer(Record):
    """`serve`'s answer to `POST /rewards`, read by TRL's server mode: one result per item sent, in order. Its keys
    are what clients have always read, so it carries no `version` key of its own."""

    results: list[RewardResult]


class OpenRLHFAnswer(Record):
    """`serve`'s answer to `POST /openrlhf`, OpenRLHF's remote reward protocol: one reward per sample (`scores` the
    same numbers, as OpenRLHF reads either) and the per-axis logs OpenRLHF merges by key (`axis:NAME` and
    `axis:NAME:graded`, one value per sample)."""

    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]
