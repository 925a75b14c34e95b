"""What a run was asked to do, as one type: `RunSpec` (the tasks and their source, the model and its sampling, the
grader's settings, the length adjustment, repeats, seed), built by `run_spec` from what the command line or an
integration was given, after the front-end rules of `GradingOptions.plan` (the grader a subset implies, which key
applies, Professional's official bundle).

The spec is what run.json records and what a resumed run is checked against: `RunSpec.identity` is the part
that decides replies and verdicts, which the run's store holds and compares (in the flat form the store has
always kept, so folders of earlier releases resume).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from healthbench.grading.grader import PER_ITEM, GraderCalls
from healthbench.grading.official import Difference, rescored
from healthbench.grading.per_reply import ITEM_OUTPUT_TOKENS
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import REFERENCE_REQUEST, GraderConfig, GradingPlan
from healthbench.runs.policy import PolicyConfig

# `attack` is an attacker model's rewrites of replies (`runs.attack`), `hackability` a judge's trials of tricks
# (`runs.hackability`): the runs `probe --attacker` and `judges` make beside their own.
Command = Literal["grade", "eval", "baseline", "meta-eval", "probe", "attack", "hackability"]
# What those two runs are, as a command that reads runs says why it takes neither.
SIDE_RUNS: dict[str, str] = {
    "attack": "an attacker model's rewrites of replies, made for the probe or judges run around it",
    "hackability": "a judge's trials of tricks, made for judges (their figures are in its judges.json)",
}

# How many tasks a run takes (a limit past the data runs all of it) and how often each is sampled, as the
# commands, the Inspect task and the verifiers taskset take them: the paper's worst-at-k goes to 16 repeats, and
# every sample of a run is held at once when it is scored.
MAX_REPEATS = 100
Limit = Annotated[int, Field(ge=1)]
Repeats = Annotated[int, Field(ge=1, le=MAX_REPEATS)]


# What a key that an identity leaves out stands for (see `GraderSpec.identity`, `DataSpec.split_identity`): the
# default, which a run that differs from it records. A resume refused for another setting says these.
LEFT_OUT: dict[str, str] = {
    "grader_request": f"the default, the reference's {json.dumps(REFERENCE_REQUEST, sort_keys=True)}",
    "grader_calls": f'the default, "{PER_ITEM}"',
    "per_reply_template_sha256": f"none (the default: graded {PER_ITEM})",
    "split": "none (the default: every task)",
    "split_seed": "none (the default: every task)",
    "heldout_sha256": "none (the default: every task)",
}


class Spec(BaseModel):
    """A part of a spec: frozen, and tolerant of fields a later release adds."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class DataSpec(Spec):
    """The tasks: `source` is `subset:NAME` or the file's path as given; `sha256` the file's, when recorded.

    `split`: the training split of it graded (`data.splits`: train, validation or heldout; None, every task), with
    the split's seed, and the rows that formed its heldout (`subset:hard` for the full set, a heldout file's path,
    or None for a seeded share) and their file's sha256."""

    source: str = "unknown"
    sha256: str | None = None
    split: str | None = None
    split_seed: int | None = None
    heldout: str | None = None
    heldout_sha256: str | None = None

    @property
    def name(self) -> str:
        """How a reader knows the data: the subset's name, or the file's path."""
        return self.source.removeprefix("subset:")

    @property
    def subset(self) -> str | None:
        """The official subset, or None for a file."""
        return self.source.removeprefix("subset:") if self.source.startswith("subset:") else None

    def split_identity(self) -> dict[str, Any]:
        """What decides a split's tasks, for a run's identity: nothing when no split was chosen, so runs made
        before splits existed resume."""
        if self.split is None:
            return {}
        return {"split": self.split, "split_seed": self.split_seed, "heldout_sha256": self.heldout_sha256}


class GraderRequest(Spec):
    """How the grader model is asked (`GraderConfig.request_settings`)."""

    api: str = "chat"
    reasoning: bool = False
    reasoning_effort: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    system_message: bool = True


class GraderSpec(Spec):
    """The grader: model, endpoint, the template's sha256 and how it is asked (None: not recorded, a run of an
    early release).

    `calls` is `per-item` (the reference's: one call per rubric item) or `per-reply` (one call per reply, opt-in,
    not the official grading), whose template's sha256 is `per_reply_template_sha256`; `per_reply_item_tokens`
    the output cap per item of a per-reply request, when it grows with the rubric. `prompt_cache_key`: whether its
    requests carried a `prompt_cache_key` (None: a run made before they did)."""

    model: str = "unknown"
    base_url: str | None = None
    template_sha256: str | None = None
    request: GraderRequest | None = None
    calls: GraderCalls = PER_ITEM
    per_reply_template_sha256: str | None = None
    per_reply_item_tokens: int | None = None
    prompt_cache_key: bool | None = None

    @classmethod
    def of(cls, config: GraderConfig) -> GraderSpec:
        """The spec of grader settings (never the key): the model, endpoint, templates' sha256, calls and prompt
        cache key as the settings name them, and how the grader is asked and its output cap per item as decided."""
        same = cls.model_validate(config, from_attributes=True)
        request = GraderRequest.model_validate(config.request_settings())
        cap = ITEM_OUTPUT_TOKENS if config.grows_output_cap else None
        return same.model_copy(update={"request": request, "per_reply_item_tokens": cap})

    @property
    def official_calls(self) -> bool:
        """Whether the grader was called as the reference calls it, once per rubric item: a run graded otherwise
        is never HealthBench's score."""
        return self.calls == PER_ITEM

    def identity(self) -> dict[str, Any]:
        """What decides the verdicts; the request only when it is not the reference's, as it has always been, and
        the calls only when not per item (so runs made before either existed resume). The prompt cache key decides
        no verdict, so it is not part of it: a run resumes with it on or off."""
        identity: dict[str, Any] = {"grader_model": self.model, "template_sha256": self.template_sha256}
        if self.request is not None and self.request.model_dump() != REFERENCE_REQUEST:
            identity["grader_request"] = self.request.model_dump()
        if not self.official_calls:
            identity["grader_calls"] = self.calls
            identity["per_reply_template_sha256"] = self.per_reply_template_sha256
        return identity


class PolicySpec(Spec):
    """The model under evaluation and how it is sampled; `reasoning` as decided (by name, unless given)."""

    model: str
    base_url: str | None = None
    system_message: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    reasoning: bool = False
    reasoning_effort: str | None = None
    policy_errors: Literal["grade", "fail"] = "grade"

    @classmethod
    def of(cls, config: PolicyConfig) -> PolicySpec:
        """The spec of policy settings (never the key)."""
        sampling = config.model_dump(include={"model", "base_url", "system_message", "temperature", "max_tokens"})
        return cls(
            **sampling,
            reasoning=config.is_reasoning,
            reasoning_effort=config.reasoning_effort,
            policy_errors=config.policy_errors,
        )

    def identity(self) -> dict[str, Any]:
        """What decides the replies."""
        return self.model_dump(include={"model", "system_message", "temperature", "max_tokens", "reasoning_effort"}) | {
            "reasoning": self.reasoning
        }


class BaselineSpec(Spec):
    """Whose completions a baseline grades: a physician group (None for Professional's physician responses), or
    the reference completions its physicians were shown."""

    group: int | None = None
    references: bool = False
    completions: str = ""
    group_description: str = ""


class ProbeSpec(Spec):
    """Which transforms of `grading.transforms` a probe rewrites each reply with, in the order given, with the
    strategies of `grading.strategies` among them when an `attacker` model rewrote the replies by them (an attack
    run's strategies, the model being its policy)."""

    transforms: list[str] = Field(default_factory=list)
    attacker: PolicySpec | None = None


class HackSpec(Spec):
    """A judge's trials (`healthbench judges`): the tricks tried (transforms, and strategies an `attacker` model
    rewrote the completions by), on how many of the rows whose criterion the physicians' majority judged not met
    (`rows`, None: all of them)."""

    tricks: list[str] = Field(default_factory=list)
    rows: int | None = None
    attacker: PolicySpec | None = None


class LengthSpec(Spec):
    """A length adjustment's settings."""

    center: float = Field(ge=0, allow_inf_nan=False)
    penalty_per_500_chars: float = Field(ge=0, allow_inf_nan=False)

    @classmethod
    def of(cls, adjustment: LengthAdjustment | None) -> LengthSpec | None:
        """The spec of an adjustment, or None."""
        return None if adjustment is None else cls(**adjustment.as_dict())

    @property
    def adjustment(self) -> LengthAdjustment:
        """As the scoring takes it."""
        return LengthAdjustment(self.center, self.penalty_per_500_chars)


class DifferenceSpec(Spec):
    """One setting that is not HealthBench Professional's official configuration's."""

    setting: str
    value: str = ""
    official: str = ""

    def __str__(self) -> str:
        return str(Difference(self.setting, self.value, self.official))


class OfficialSpec(Spec):
    """How a HealthBench Professional run differs from its official configuration (nothing: it is in it)."""

    differences: list[DifferenceSpec] = Field(default_factory=list)

    @property
    def configuration(self) -> bool:
        """Whether the run is in the official configuration."""
        return not self.differences

    @classmethod
    def of(cls, differences: list[Difference] | None) -> OfficialSpec | None:
        """None for a run that has no official configuration (every subset but Professional)."""
        if differences is None:
            return None
        return cls(differences=[DifferenceSpec(**d.as_dict()) for d in differences])

    def rescored_with(self, adjustment: LengthAdjustment | None) -> OfficialSpec:
        """The differences once the run is rescored with `adjustment`."""
        found = [Difference(d.setting, d.value, d.official) for d in self.differences]
        return OfficialSpec(differences=[DifferenceSpec(**d.as_dict()) for d in rescored(found, adjustment)])


class RunSpec(Spec):
    """What a run was asked to do."""

    command: Command
    data: DataSpec = Field(default_factory=DataSpec)
    grader: GraderSpec = Field(default_factory=GraderSpec)
    seed: int = 0
    limit: int | None = None
    n_repeats: int = 1
    responses: str | None = None
    policy: PolicySpec | None = None
    baseline: BaselineSpec | None = None
    probe: ProbeSpec | None = None
    hack: HackSpec | None = None
    length_adjustment: LengthSpec | None = None
    official: OfficialSpec | None = None

    @property
    def adjustment(self) -> LengthAdjustment | None:
        """The length adjustment, as the scoring takes it."""
        return None if self.length_adjustment is None else self.length_adjustment.adjustment

    @property
    def subject(self) -> str:
        """What was graded: the model (`eval`), the completions (`baseline`), the replies file (`grade`)."""
        if self.policy is not None:
            return self.policy.model
        if self.baseline is not None and self.baseline.completions:
            return self.baseline.completions
        return self.responses or "unknown"

    @property
    def samples_the_model(self) -> bool:
        """Whether repeats are the evaluated model asked again (worst-at-k applies), not fixed replies or several
        physicians' completions."""
        return self.command == "eval"

    def identity(self) -> dict[str, Any]:
        """What decides the replies and verdicts of the run, in the flat form its store keeps and compares.
        `grade` leaves its data out, as it always has, so folders made before it recorded its data resume."""
        identity: dict[str, Any] = {"command": self.command}
        if self.command != "grade":
            identity |= {"data_sha256": self.data.sha256, "limit": self.limit}
        identity |= self.data.split_identity()
        if self.command == "eval":
            identity["n_repeats"] = self.n_repeats
            identity |= self.policy.identity() if self.policy is not None else {}
        if self.command == "baseline" and self.baseline is not None:
            identity |= {"group": self.baseline.group, "references": self.baseline.references}
        # A probe's transform set is part of it, as its limit is: its results.jsonl and probe.json are of that set,
        # and another set written into the folder would replace them. The set, not the order given.
        if self.command == "probe":
            identity["transforms"] = sorted(self.probe.transforms) if self.probe is not None else []
            identity |= self.policy.identity() if self.policy is not None else {}
            if self.probe is not None and self.probe.attacker is not None:
                identity["attacker"] = self.probe.attacker.identity()
        # An attack run's rewrites are its model's, keyed by reply and strategy: a set of strategies or replies
        # added later is rewritten beside them, and no grader is asked. A judge's trials are verdicts keyed by the
        # exact request, so more rows or tricks later are asked beside the rest.
        if self.command == "attack":
            return identity | (self.policy.identity() if self.policy is not None else {})
        return identity | self.grader.identity()

    @staticmethod
    def flat_fields(run: dict[str, Any]) -> dict[str, Any]:
        """The fields of the spec of a run.json of schema version 1 (one flat object of every setting), for
        `RunRecord`'s validator to migrate. A run.json of those releases always named its command; one without
        (written by hand) is taken for the command its settings belong to: `eval` with a model, `baseline` with a
        physician group, else `grade`."""
        command = run.get("command") or ("eval" if "model" in run else "baseline" if "group" in run else "grade")
        spec: dict[str, Any] = {
            "command": command,
            "data": {"source": run.get("data") or "unknown", "sha256": run.get("data_sha256")},
            "grader": {
                "model": run.get("grader_model") or "unknown",
                "base_url": run.get("grader_base_url"),
                "template_sha256": run.get("template_sha256"),
                "request": run.get("grader_request"),
            },
            "seed": run.get("seed", 0),
            "limit": run.get("limit"),
            "n_repeats": run.get("n_repeats") or 1,
            "responses": run.get("responses"),
            "length_adjustment": run.get("length_adjustment"),
        }
        if command == "eval" or "model" in run:
            policy = {key: run[key] for key in PolicySpec.model_fields if key in run}
            spec["policy"] = {"model": "unknown"} | policy
        if command == "baseline":
            spec["baseline"] = {key: run[key] for key in BaselineSpec.model_fields if key in run}
        if run.get("official_configuration") is not None:
            found = [Difference.read(d).as_dict() for d in run.get("official_differences") or []]
            spec["official"] = {"differences": found}
        return spec


def run_spec(
    command: Command,
    plan: GradingPlan,
    data: DataSpec,
    *,
    seed: int,
    limit: int | None = None,
    n_repeats: int = 1,
    responses: str | None = None,
    policy: PolicyConfig | None = None,
    baseline: BaselineSpec | None = None,
    transforms: Sequence[str] | None = None,
    attacker: PolicyConfig | None = None,
    hack: HackSpec | None = None,
) -> RunSpec:
    """The spec of a run: the one place a run's settings are put together, for every command."""
    return RunSpec(
        command=command,
        data=data,
        grader=GraderSpec.of(plan.grader),
        seed=seed,
        limit=limit,
        n_repeats=n_repeats,
        responses=responses,
        policy=None if policy is None else PolicySpec.of(policy),
        baseline=baseline,
        probe=None
        if transforms is None
        else ProbeSpec(transforms=list(transforms), attacker=None if attacker is None else PolicySpec.of(attacker)),
        hack=hack,
        length_adjustment=LengthSpec.of(plan.length_adjustment),
        official=OfficialSpec.of(plan.differences),
    )
