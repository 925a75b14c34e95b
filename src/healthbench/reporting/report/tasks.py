"""The report's per-task drill-down: each sample's conversation, reply, reply length and graded rubric."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from healthbench.grading.scoring import LengthAdjustment
from healthbench.reporting.report.common import label


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
    is the provider's error when the model refused the prompt (the reply graded is then a placeholder).
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


def _item(item: Mapping[str, Any]) -> Item:
    points = int(item.get("points", 0))
    met = bool(item.get("criteria_met"))
    # A met negative item costs points (a penalty); an unmet one is a pitfall the reply avoided.
    kind = ("penalty" if met else "avoided") if points < 0 else ("met" if met else "missed")
    tags = " ".join(str(tag) for tag in item.get("tags") or [])
    return Item(points, met, kind, str(item.get("criterion", "")), str(item.get("explanation", "")), tags)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def slice_of(record: Mapping[str, Any], prefix: str | None) -> str:
    """The value of the task's `prefix` tag (its theme, or its use case), as a reader sees it."""
    if prefix is None:
        return ""
    tags = list(record.get("example_tags") or []) or list(record.get("metrics") or {})
    return next((label(tag) for tag in tags if isinstance(tag, str) and tag.startswith(f"{prefix}:")), "")


def task(
    index: int,
    record: Mapping[str, Any],
    *,
    prefix: str | None,
    adjustment: LengthAdjustment | None,
    adjusted_headline: bool,
    repeat: Callable[[int | None], str] = lambda _: "",
) -> Task:
    """A drill-down row of one results.jsonl record; with `adjustment` the adjusted score is computed
    afresh from the reply, else the record's own `length_adjusted_score` is shown when it has one."""
    raw_score = _number(record.get("score", (record.get("metrics") or {}).get("overall_score")))
    response = str(record.get("response", ""))
    adjusted = _number(record.get("length_adjusted_score"))
    if adjustment is not None and raw_score is not None:
        adjusted = adjustment.adjust(raw_score, response)
    score = adjusted if adjusted_headline else raw_score
    items = [_item(item) for item in record.get("rubric_items") or [] if isinstance(item, Mapping)]
    # Penalties first among the met items, missed points first among the rest: what cost the reply most.
    items.sort(key=lambda item: (item.kind not in ("penalty", "missed"), -abs(item.points)))
    prompt = [
        (str(m.get("role", "")), str(m.get("content", "")))
        for m in record.get("prompt") or []
        if isinstance(m, Mapping)
    ]
    number = record.get("repeat")
    return Task(
        index=index,
        id=str(record.get("prompt_id", "")),
        repeat=repeat(int(number) if isinstance(number, int) else None),
        slice=slice_of(record, prefix),
        score=score,
        raw_score=raw_score,
        adjusted=adjusted,
        chars=len(response),
        bar=0.0 if score is None else 100 * min(max(score, 0.0), 1.0),
        prompt=prompt,
        response=response,
        met=[item for item in items if item.met],
        unmet=[item for item in items if not item.met],
        penalties=sum(1 for item in items if item.kind == "penalty"),
        refusal=_refusal(record.get("policy_error")),
    )


def _refusal(error: Any) -> str:
    if not isinstance(error, Mapping):
        return ""
    code = f" {error['code']}" if error.get("code") else ""
    return f"HTTP {error.get('status', '?')}{code}: {error.get('message', '')}"
