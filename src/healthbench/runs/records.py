"""What a run folder holds, as types: run.json (`RunRecord`: the `RunSpec` and how the run went), each line of
results.jsonl (`SampleRecord` for a graded sample, `MetaRecord` for a meta-eval row, `TrialRecord` for a judge's
trial of a trick, `RewriteRecord` for an attacker's rewrite), failures.jsonl
(`FailureRecord`), usage.json (`UsageRecord`), a probe's probe.json (`ProbeRecord`) and a meta-eval's
agreement.json (`AgreementRecord`); metrics.json stays a
plain object of numbers, exactly the reference's keys (`Metrics`).

These are read and written by `runs.folder` alone. run.json carries a schema version (`Versioned`): a run.json
without one is the flat object of the release before it, migrated by the record's own validator into the same
types, and a version this release does not read (a later release's, or "2" as a string) is refused naming both.
Fields a record may lack (runs written before they existed) have defaults, so every reader handles one shape.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from healthbench.api.wire import Usage
from healthbench.data.schema import Message
from healthbench.grading.gains import Gain
from healthbench.grading.grader import GradedItem
from healthbench.grading.sample import GradedSample
from healthbench.runs.policy import PromptRefusal
from healthbench.runs.spec import GraderSpec, RunSpec

# 1: the flat run.json of the first releases (no `version` key); 2: `{"version", "spec", "stats"}`.
RUN_SCHEMA_VERSION: Final = 2

Metrics = dict[str, float]


class Record(BaseModel):
    """A record of a run folder: fields kept as read (a later release's extra fields are ignored, not lost on
    a rewrite by that release, since this one never rewrites another's records)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class Versioned(Record):
    """A record that carries its schema version: `version` is a `Literal` of the versions this release reads
    (the newest its default), and any other value, a string "2" included, is refused naming both."""

    FILE: ClassVar[str] = "record"

    @field_validator("version", mode="before", check_fields=False)
    @classmethod
    def _known_version(cls, value: Any) -> Any:
        reads = get_args(cls.model_fields["version"].annotation)
        if type(value) is not int or value not in reads:
            raise PydanticCustomError(
                "unknown_version",
                "{file} of version {found}, which this release does not read (it reads version {reads}); was it "
                "written by a later release?",
                {"file": cls.FILE, "found": repr(value), "reads": " or ".join(map(str, reads))},
            )
        return value


class TokenCounts(Record):
    """Calls and their tokens: what calls made used (`UsageNumbers`) or what calls to make are expected to
    (`outputs.SideEstimate`), under the same names."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0


class UsageNumbers(TokenCounts):
    """Tokens of one or more calls, as results.jsonl and usage.json count them; `batch` is 1 for calls priced at
    Batch API rates; `unmetered` the calls answered without usage (their tokens, and so the cost, unknown)."""

    batch: int = 0
    unmetered: int = 0

    @classmethod
    def of(cls, usage: Usage) -> UsageNumbers:
        """The record of a `Usage`."""
        return cls(**usage.as_dict())

    def usage(self) -> Usage:
        """As the `Usage` the code sums."""
        return Usage.from_dict(self.model_dump(include=set(UsageNumbers.model_fields)))

    @property
    def cache_hit_rate(self) -> float | None:
        """The share of prompt tokens read from the provider's prompt cache (None without prompt tokens)."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else None


# A rubric item with the grader's verdict, as results.jsonl holds it: grading's own value, read and written whole.
ItemRecord = GradedItem


class PolicyErrorRecord(Record):
    """The provider's refusal of a prompt, graded with the reference's placeholder reply."""

    status: int
    code: str | None = None
    message: str = ""

    @classmethod
    def of(cls, refusal: PromptRefusal) -> PolicyErrorRecord:
        """The record of a refusal."""
        return cls(status=refusal.status, code=refusal.code, message=refusal.message)


class SampleRecord(Record):
    """One graded sample: a line of results.jsonl of `grade`, `eval` or `baseline`.

    `score` is the unclipped task score and `metrics` the task's metric dict (docs/SPEC.md section 4);
    `length_adjusted_score` is there when the run had a length adjustment. `policy_model` and `policy_usage` are
    there when the reply was sampled from the model under evaluation (`eval`). `suspect` names the rules of
    `grading.suspect` the reply trips (it addresses the grader), empty for a clean reply; it never changes a score.
    In a probe's results, `transform` names the trick the graded reply was rewritten by (absent for the reply as
    it is, the base).
    """

    prompt_id: str
    repeat: int = Field(default=0, ge=0)
    score: float
    metrics: Metrics
    response: str | None = None
    prompt: list[Message] = Field(default_factory=list)
    example_tags: list[str] = Field(default_factory=list)
    rubric_items: list[ItemRecord] = Field(default_factory=list)
    usage: UsageNumbers | None = None
    grader_model: str | None = None
    length_adjusted_score: float | None = None
    policy_model: str | None = None
    policy_usage: UsageNumbers | None = None
    policy_error: PolicyErrorRecord | None = None
    suspect: list[str] = Field(default_factory=list)
    transform: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        """Which sample: (task, repeat)."""
        return self.prompt_id, self.repeat

    @property
    def headline(self) -> float:
        """The task's headline score: length-adjusted when the run adjusts, else the score."""
        return self.score if self.length_adjusted_score is None else self.length_adjusted_score

    @classmethod
    def of(
        cls,
        sample: GradedSample,
        *,
        policy_model: str | None = None,
        policy_usage: Usage | None = None,
        policy_error: PolicyErrorRecord | None = None,
        transform: str | None = None,
    ) -> SampleRecord:
        """The record of a graded sample, with the model that wrote its reply (`eval`) when there is one."""
        return cls(
            prompt_id=sample.row.prompt_id,
            repeat=sample.repeat,
            score=sample.score,
            metrics=dict(sample.metrics),
            response=sample.reply,
            prompt=list(sample.transcript[:-1]),
            example_tags=list(sample.row.example_tags),
            rubric_items=list(sample.items),
            usage=UsageNumbers.of(sample.usage),
            grader_model=sample.grader_model,
            length_adjusted_score=sample.adjusted,
            policy_model=policy_model,
            policy_usage=None if policy_usage is None else UsageNumbers.of(policy_usage),
            policy_error=policy_error,
            suspect=list(sample.suspect),
            transform=transform,
        )


class MetaRecord(Record):
    """One meta-eval row as graded: a line of a meta-eval run's results.jsonl."""

    index: int = Field(ge=0)
    prompt_id: str
    completion_id: str = ""
    category: str
    rubric: str = ""
    criteria_met: bool
    explanation: str = ""
    binary_labels: list[bool]
    anonymized_physician_ids: list[str]
    usage: UsageNumbers | None = None
    grader_model: str | None = None
    # Seconds the row's grader call spent on the wire (`Usage.wire_microseconds`), whichever session asked; None
    # for a row without a call of its own (a per-reply call's later items), a batch, or a verdict asked before
    # latency was kept.
    seconds: float | None = None


class TrialRecord(MetaRecord):
    """One trial of a judge (`healthbench judges`' hackability): a meta-eval row (`index`, its line in the judge's
    meta-eval results) whose criterion the physicians' majority judged not met, its completion rewritten by `trick`
    (a transform of `grading.transforms`, or a strategy of `grading.strategies` written by the model `attacker`),
    graded against the row's criterion: a line of the judge's hackability run's results.jsonl."""

    trick: str
    attacker: str | None = None


class RewriteRecord(Record):
    """One reply rewritten by an attacker model: a line of an attack run's results.jsonl. The reply is a task's
    (`prompt_id`) or a meta-eval completion (`prompt_id`, `completion_id`); `strategy` is the strategy of
    `grading.strategies` it was rewritten by, `attacker` the model that wrote `text`, `key` the reply and strategy
    as the run's store keeps the rewrite (a digest of the conversation and the reply with it, so an edited reply is
    rewritten afresh), and `usage` what the call cost, whichever session made it."""

    key: str
    prompt_id: str
    completion_id: str = ""
    strategy: str
    attacker: str
    text: str
    usage: UsageNumbers | None = None


class FailureRecord(Record):
    """A sample the last session could not grade: a line of failures.jsonl. `repeat` is None for a meta-eval
    row, which has none."""

    prompt_id: str | None = None
    repeat: int | None = None
    transform: str | None = None
    criterion: str | None = None
    cause: str | None = None
    error: str = ""

    @classmethod
    def of(
        cls, error: Exception, prompt_id: str | None = None, repeat: int | None = None, *, transform: str | None = None
    ) -> FailureRecord:
        """The record of a failure: its message, and its rubric item and cause when the error names them; a probe's
        `transform` when the reply failed rewritten."""
        named = {
            field: value for field in ("criterion", "cause") if isinstance(value := getattr(error, field, None), str)
        }
        return cls(prompt_id=prompt_id, repeat=repeat, transform=transform, error=str(error), **named)


class SideUsage(UsageNumbers):
    """One side's tokens (policy or grader) in usage.json, with its model, its calls made in batches, its cost
    (None when the model has no price) and what its cached prompt tokens took off that cost (None also for a run
    made before it was recorded)."""

    batch_calls: int = 0
    model: str = ""
    cost_usd: float | None = None
    cache_saved_usd: float | None = None


class UsageReport(Record):
    """Tokens and USD per side of one scope (the whole run, or this session), the priced total, and the models
    without a price."""

    grader: SideUsage | None = None
    policy: SideUsage | None = None
    cost_usd: float | None = None
    unpriced_models: list[str] = Field(default_factory=list)

    def side(self, name: Literal["grader", "policy"]) -> SideUsage | None:
        """The `grader` or `policy` side."""
        return self.grader if name == "grader" else self.policy


class BatchCounts(Record):
    """Batches created and requests uploaded in them."""

    batches: int = 0
    requests: int = 0


class BatchTotals(Record):
    """Batch counts of this session and of the whole run."""

    this_session: BatchCounts = Field(default_factory=BatchCounts)
    whole_run: BatchCounts = Field(default_factory=BatchCounts)


class UsageRecord(Record):
    """usage.json: the whole run's tokens and cost (every session of the folder) beside this session's, which is
    what it added, so the sessions add up to the whole run."""

    whole_run: UsageReport
    this_session: UsageReport | None = None
    verdict_cache_hits: int = 0
    batches: BatchTotals = Field(default_factory=BatchTotals)


class TransformGain(Record):
    """What one transform of a probe gains: the mean gain in task score (transformed minus base, unclipped), its
    seeded bootstrap 95% interval, the share of tasks it gained on, and over how many tasks."""

    mean_gain: float
    ci95: tuple[float, float]
    share_gained: float
    n: int

    @classmethod
    def of(cls, gain: Gain) -> TransformGain:
        """The record of a computed gain."""
        return cls(mean_gain=gain.mean_gain, ci95=gain.ci95, share_gained=gain.share_gained, n=gain.n)

    def gain(self) -> Gain:
        """As `grading.gains` computes with it."""
        return Gain(self.mean_gain, self.ci95, self.share_gained, self.n)


class ProbeRecord(Record):
    """probe.json: the base replies' `overall_score` (as `grade` gives it), the tasks, the grader as run.json
    records it, which task score the gains are of (`score`, or `length_adjusted_score` when the run has a length
    adjustment: the reward `serve` gives), and each transform's figures."""

    base_mean_score: float
    n_tasks: int
    grader: GraderSpec
    reward: Literal["score", "length_adjusted_score"] = "score"
    transforms: dict[str, TransformGain]

    def gains(self) -> dict[str, Gain]:
        """Each transform's figures, as `grading.gains` computes with them."""
        return {name: figures.gain() for name, figures in self.transforms.items()}


class AgreementFigure(Record):
    """One agreement figure and the number of label pairs behind it (the reference's `{"n", "value"}`)."""

    n: int
    value: float


class GroupAgreement(Record):
    """The grader's macro F1 in one group of meta-eval rows (a theme, a consensus criterion, or "all") beside the
    physicians' (pooled, and spread over the physicians whose own is defined there); None where undefined."""

    group: str
    rows: int
    pairs: int
    model_f1: float | None = None
    physicians_pooled_f1: float | None = None
    physicians: int = 0
    physician_min: float | None = None
    physician_median: float | None = None
    physician_max: float | None = None


class AgreementRecord(Versioned):
    """A meta-eval's agreement.json: the grader's figures and the pooled physicians' with their pair counts,
    each physician's (by figure, then physician: the reference's metadata), and the report's comparison by
    theme (the first row all rows) and by consensus criterion. A file of the releases before it was versioned
    is version 1."""

    FILE: ClassVar[str] = "agreement.json"

    version: Literal[1] = 1
    model_agreement_metrics: dict[str, AgreementFigure] = Field(default_factory=dict)
    physician_agreement_pooled: dict[str, AgreementFigure] = Field(default_factory=dict)
    physician_agreement_metric_lists: dict[str, dict[str, AgreementFigure]] = Field(default_factory=dict)
    by_theme: list[GroupAgreement] = Field(default_factory=list)
    by_category: list[GroupAgreement] = Field(default_factory=list)


class RunStats(Record):
    """How the last session of a run went: samples planned, failed and left in batches, its seconds, and the
    whole run's cost."""

    samples: int | None = None
    failed: int = 0
    deferred: int = 0
    seconds: float | None = None
    cost_usd: float | None = None

    @property
    def finished(self) -> bool:
        """Whether no planned sample failed or is left waiting in a batch."""
        return not self.failed and not self.deferred


class RunRecord(Versioned):
    """run.json: what the run was asked to do (`spec`) and how its last session went (`stats`). Validating the
    flat run.json of version 1 (no `version` key) migrates it into these types, its version kept as 1."""

    FILE: ClassVar[str] = "run.json"

    version: Literal[1, 2] = RUN_SCHEMA_VERSION
    spec: RunSpec
    stats: RunStats = Field(default_factory=RunStats)

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, value: Any) -> Any:
        # The flat object has neither key; a record built in code (`RunRecord(spec=...)`) has its spec.
        if not isinstance(value, dict) or "version" in value or "spec" in value:
            return value
        stats = {key: value[key] for key in RunStats.model_fields if key in value}
        return {"version": 1, "spec": RunSpec.flat_fields(value), "stats": stats}
