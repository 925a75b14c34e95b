"""HealthBench as Inspect tasks, graded by this project's grader (`pip install healthbench[inspect]`).

Registered through Inspect's `inspect_ai` entry point, so `inspect eval healthbench/healthbench --model
openai/gpt-4.1` needs no other set-up (`healthbench/healthbench_hard`, `_consensus` and `_professional` name
the other subsets). Each sample's input is the task's role-tagged conversation; the model's reply is graded
item by item with the reference's prompt and verdict rules, through one grader per process (its retries and
its one concurrency budget). An item that cannot be graded raises, so the sample is an error in the log and
never a 0. A sample's score is the unclipped task score (length-adjusted when asked); its metadata holds the
task's metric dict and every verdict with its explanation. The metrics are the reference's: the clipped mean,
its bootstrap std and the same per theme and axis (per slice for Professional), with repeats (epochs) pooled
as separate samples, equal to what `healthbench grade` writes to metrics.json for the same replies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessage, ChatMessageAssistant, ChatMessageSystem, ChatMessageUser
from inspect_ai.scorer import Metric, SampleScore, Score, Scorer, Target, Value, metric, scorer
from inspect_ai.solver import TaskState, generate

from healthbench.data.schema import Message, Row
from healthbench.errors import DataError
from healthbench.grading import scoring
from healthbench.grading.aggregate import aggregate_samples
from healthbench.grading.sample import GradedSample, grade_sample
from healthbench.grading.scoring import WORST_AT_K
from healthbench.grading.settings import GradingOptions
from healthbench.integrations.common import GRADERS, load_tasks, sized, slice_prefixes
from healthbench.runs.records import SampleRecord
from healthbench.runs.spec import GraderSpec, LengthSpec

ROW_KEY = "healthbench_row"

__all__ = [
    "bootstrap_std",
    "clipped_mean",
    "healthbench",
    "healthbench_consensus",
    "healthbench_hard",
    "healthbench_professional",
    "healthbench_scorer",
    "slice_scores",
]


def _chat_message(message: Message) -> ChatMessage:
    if message.role == "system":
        return ChatMessageSystem(content=message.content)
    if message.role == "assistant":
        return ChatMessageAssistant(content=message.content)
    return ChatMessageUser(content=message.content)


def _sample(row: Row) -> Sample:
    # The row rides on its sample, so the scorer's options stay a few settings (Inspect records them in the
    # log's header) and `inspect score` can grade a log again.
    return Sample(
        input=[_chat_message(message) for message in row.prompt],
        id=row.prompt_id,
        metadata={ROW_KEY: row.model_dump(mode="json", include={"prompt", "prompt_id", "example_tags", "rubrics"})},
    )


def _records(scores: Sequence[SampleScore]) -> list[SampleRecord]:
    records = []
    for sample_score in scores:
        record = sample_score.score.metadata
        if not record or "metrics" not in record:
            raise DataError(f"sample {sample_score.sample_id}: its score has no HealthBench record to aggregate")
        records.append(SampleRecord.model_validate(record))
    return records


# The last aggregate and what it was computed from: Inspect asks each metric in turn for the same scores, and
# the bootstrap over thousands of samples takes a second, during which the event loop (and grading) waits.
_last: tuple[Any, dict[str, Any]] | None = None


def _metrics(scores: Sequence[SampleScore], seed: int, adjustment: Mapping[str, float] | None) -> dict[str, Any]:
    global _last
    records = _records(scores)
    key = (
        seed,
        None if adjustment is None else tuple(sorted(adjustment.items())),
        tuple((r.prompt_id, r.repeat, r.score, r.response, tuple(sorted(r.metrics.items()))) for r in records),
    )
    if _last is None or _last[0] != key:
        settings = None if adjustment is None else LengthSpec.model_validate(adjustment).adjustment
        # Inspect's epochs are the model asked again: worst-at-k applies, as for `healthbench eval`.
        _last = (key, aggregate_samples(records, seed=seed, length_adjustment=settings, model_samples=True))
    return _last[1]


@metric(scores="unreduced")
def clipped_mean() -> Metric:
    """The headline: the mean of the (unclipped, length-adjusted when asked) task scores, clipped to [0, 1]."""

    def compute(scores: list[SampleScore]) -> Value:
        # The score values are the task scores the headline averages: no need for the whole aggregate.
        return scoring.clipped_mean([score.score.as_float() for score in scores]) if scores else math.nan

    return compute


@metric(scores="unreduced")
def bootstrap_std(seed: int = 0, length_adjustment: dict[str, float] | None = None) -> Metric:
    """The population std of 1,000 seeded bootstrap resample means, each clipped to [0, 1]."""

    def compute(scores: list[SampleScore]) -> Value:
        return float(_metrics(scores, seed, length_adjustment)["score:bootstrap_std"]) if scores else math.nan

    return compute


@metric(scores="unreduced")
def slice_scores(prefixes: list[str], seed: int = 0, length_adjustment: dict[str, float] | None = None) -> Metric:
    """The clipped mean and bootstrap std of each tag starting with one of `prefixes` (`theme:`, `axis:`, ...),
    under the reference's key names, the unadjusted `overall_score` when scores are length-adjusted, and
    `worst_at_k:K` (the paper's reliability figure) when every task was sampled n >= 2 times."""

    def compute(scores: list[SampleScore]) -> Value:
        metrics = _metrics(scores, seed, length_adjustment) if scores else {}
        wanted = sorted(
            name
            for name in metrics
            if name.startswith(tuple(prefixes)) and not name.endswith((":n_samples", ":bootstrap_std"))
        )
        if length_adjustment is not None and metrics:
            wanted.insert(0, "overall_score")
        out: dict[str, float] = {}
        for name in wanted:
            out[name] = float(metrics[name])
            out[f"{name}:bootstrap_std"] = float(metrics[f"{name}:bootstrap_std"])
        out.update({name: float(value) for name, value in metrics.items() if name.startswith(f"{WORST_AT_K}:")})
        return out

    return compute


def _system_message(state: TaskState, row: Row) -> str | None:
    """A system message the solver added ahead of the task's own conversation, which the reference puts at
    the head of the graded transcript."""
    first = state.messages[0] if state.messages else None
    if isinstance(first, ChatMessageSystem) and row.prompt[0].role != "system":
        return first.text
    return None


def _score(sample: GradedSample, policy_model: str) -> Score:
    met = sum(item.criteria_met for item in sample.items)
    return Score(
        value=sample.reward,
        answer=sample.reply,
        explanation=f"{met} of {len(sample.items)} rubric items met; task score {sample.score:.4f}",
        metadata=SampleRecord.of(sample, policy_model=policy_model).model_dump(mode="json", exclude_none=True),
    )


@scorer(metrics=[], name="healthbench")
def healthbench_scorer(subset: str | None = None, grading: dict[str, Any] | None = None) -> Scorer:
    """Grade the model's last reply against its sample's rubric with this project's grader; `grading` holds
    the `GradingOptions` given (grader settings and length adjustment), the rest as `subset` defaults them."""
    plan = GradingOptions(**(grading or {})).plan(subset)
    config, adjustment = plan.grader, plan.length_adjustment

    async def score(state: TaskState, target: Target) -> Score:
        row = Row.model_validate(state.metadata[ROW_KEY])
        async with GRADERS.lease(config) as shared:
            graded = await grade_sample(
                shared,
                row,
                state.output.completion,
                repeat=state.epoch - 1,
                system_message=_system_message(state, row),
                adjustment=adjustment,
            )
        return _score(graded, str(state.model))

    return score


def _dataset_name(data: str, split: str | None) -> str:
    return data if split is None else f"{data} ({split})"


@task
def healthbench(
    subset: str | None = None,
    data: str | None = None,
    limit: int | None = None,
    n_repeats: int = 1,
    seed: int = 0,
    split: str | None = None,
    heldout: str | None = None,
    split_seed: int = 0,
    **grading: Any,
) -> Task:
    """HealthBench: `subset` full (default), hard, consensus or professional, or `data`, a file in the official
    schema or Professional's (graded, as the professional subset is, with its official settings); `limit` tasks
    sampled as the reference does; each task `n_repeats` times, pooled; `seed` seeds the
    bootstrap. `split` (train, validation or heldout) takes one training split of the full set or of `data`
    (`heldout`: a file of the rows that form it, with `data`; `split_seed`: the split's seed; docs/training.md).
    `grading` takes any `GradingOptions` field (`grader_model`, `grader_base_url`, `grader_api`,
    `grader_reasoning_effort`, ..., `length_adjustment_center`, `length_adjustment_penalty_per_500_chars`); what
    is left unset comes from HEALTHBENCH_GRADER_* (key HEALTHBENCH_GRADER_API_KEY, else OPENAI_API_KEY), then
    the subset's official settings."""
    sized(limit=limit, n_repeats=n_repeats, seed=seed)
    options = GradingOptions(**grading)
    rows, kind = load_tasks(subset, data, limit, split=split, heldout=heldout, split_seed=split_seed)
    plan = options.plan(kind)
    settings = None if plan.length_adjustment is None else plan.length_adjustment.as_dict()
    given = options.model_dump(exclude_defaults=True)
    return Task(
        dataset=MemoryDataset([_sample(row) for row in rows], name=_dataset_name(subset or data or "full", split)),
        solver=generate(),
        scorer=healthbench_scorer(kind, given),
        metrics=[
            clipped_mean(),
            bootstrap_std(seed, settings),
            slice_scores(list(slice_prefixes(kind)), seed, settings),
        ],
        epochs=Epochs(n_repeats) if n_repeats > 1 else None,
        metadata={"grader": GraderSpec.of(plan.grader).model_dump(), "length_adjustment": settings, "seed": seed}
        | ({} if split is None else {"split": split, "split_seed": split_seed, "heldout": heldout}),
    )


@task
def healthbench_hard(limit: int | None = None, n_repeats: int = 1, grader_model: str | None = None) -> Task:
    """HealthBench Hard (1,000 tasks); `healthbench/healthbench -T subset=hard` takes every other argument."""
    return healthbench(subset="hard", limit=limit, n_repeats=n_repeats, grader_model=grader_model)


@task
def healthbench_consensus(limit: int | None = None, n_repeats: int = 1, grader_model: str | None = None) -> Task:
    """HealthBench Consensus (3,671 tasks); `healthbench/healthbench -T subset=consensus` takes the rest."""
    return healthbench(subset="consensus", limit=limit, n_repeats=n_repeats, grader_model=grader_model)


@task
def healthbench_professional(limit: int | None = None, n_repeats: int = 1) -> Task:
    """HealthBench Professional in its official configuration (gpt-5.4 at low effort through the Responses
    API, length-adjusted); `healthbench/healthbench -T subset=professional` takes overrides."""
    return healthbench(subset="professional", limit=limit, n_repeats=n_repeats)
