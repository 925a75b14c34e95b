"""The report's per-task drill-down: each sample's conversation, reply, reply length and graded rubric."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from healthbench.grading.scoring import LengthAdjustment
from healthbench.reporting.report.common import label
from healthbench.runs.records import ItemRecord, PolicyErrorRecord, SampleRecord


@dataclass(frozen=True, slots=True)
class Item:
    """A graded rubric item as shown: `kind` is met, penalty, missed or avoided."""

    points: int
    met: bool
    kind: str
    criterion: str
    explanation: str
    tags: str


@dataclass(frozen=True, slots=True)
class Task:
    """One drill-down row; the fields older runs did not write are empty.

    `score` is the task's headline score (length-adjusted when the run's headline is), `raw_score` the
    unadjusted one, `adjusted` the length-adjusted one or None, and `chars` the reply's length. `repeat`
    names the sample among its task's ("repeat 2 of 3"; "" without repeats). `refusal`
    is the provider's error when the model refused the prompt (the reply graded is then a placeholder);
    `suspect` the rules of `grading.suspect` the reply trips, comma-separated ("" for a clean reply).
    """

    index: int
    id: str
    repeat: str
    slice: str
    score: float | None
    raw_score: float | None
    adjusted: float | None
    chars: int
    bar: float
    prompt: list[tuple[str, str]]
    response: str
    met: list[Item]
    unmet: list[Item]
    penalties: int
    refusal: str
    suspect: str


def _item(item: ItemRecord) -> Item:
    # A met negative item costs points (a penalty); an unmet one is a pitfall the reply avoided.
    kind = (
        ("penalty" if item.criteria_met else "avoided")
        if item.points < 0
        else ("met" if item.criteria_met else "missed")
    )
    return Item(item.points, item.criteria_met, kind, item.criterion, item.explanation, " ".join(item.tags))


def slice_of(record: SampleRecord, prefix: str | None) -> str:
    """The value of the task's `prefix` tag (its theme, or its use case), as a reader sees it."""
    if prefix is None:
        return ""
    tags = record.example_tags or list(record.metrics)
    return next((label(tag) for tag in tags if tag.startswith(f"{prefix}:")), "")


def task(
    index: int,
    record: SampleRecord,
    *,
    prefix: str | None,
    adjustment: LengthAdjustment | None,
    adjusted_headline: bool,
    repeat: Callable[[int | None], str] = lambda _: "",
) -> Task:
    """A drill-down row of one results.jsonl record; with `adjustment` the adjusted score is computed
    afresh from the reply, else the record's own `length_adjusted_score` is shown when it has one."""
    response = record.response or ""
    adjusted = record.length_adjusted_score
    if adjustment is not None:
        adjusted = adjustment.adjust(record.score, response)
    score = adjusted if adjusted_headline else record.score
    items = [_item(item) for item in record.rubric_items]
    # Penalties first among the met items, missed points first among the rest: what cost the reply most.
    items.sort(key=lambda item: (item.kind not in ("penalty", "missed"), -abs(item.points)))
    return Task(
        index=index,
        id=record.prompt_id,
        repeat=repeat(record.repeat),
        slice=slice_of(record, prefix),
        score=score,
        raw_score=record.score,
        adjusted=adjusted,
        chars=len(response),
        bar=0.0 if score is None else 100 * min(max(score, 0.0), 1.0),
        prompt=[(message.role, message.content) for message in record.prompt],
        response=response,
        met=[item for item in items if item.met],
        unmet=[item for item in items if not item.met],
        penalties=sum(1 for item in items if item.kind == "penalty"),
        refusal=_refusal(record.policy_error),
        suspect=", ".join(record.suspect),
    )


def _refusal(error: PolicyErrorRecord | None) -> str:
    if error is None:
        return ""
    code = f" {error.code}" if error.code else ""
    return f"HTTP {error.status}{code}: {error.message}"
