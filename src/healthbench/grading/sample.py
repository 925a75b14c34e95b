"""What the Inspect task and the verifiers taskset share: their arguments, one grader per process, one graded
sample.

Neither framework is imported here, so both adapters (`inspect_task`, `verifiers_env`) stay thin and grade
exactly as `healthbench grade` does: the same rows (`limit` sampled as the reference samples), the same
grader settings (the HEALTHBENCH_GRADER_* environment, HealthBench Professional's official defaults), the
same transcript, task metrics and length adjustment. A reply that cannot be graded raises `GradingError`;
nothing here turns it into a score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from healthbench.data.schema import Row
from healthbench.grading.grader import GradedItem, Grader
from healthbench.grading.prompt import transcript_with_reply
from healthbench.grading.scoring import LengthAdjustment, task_metrics


@dataclass(frozen=True)
class GradedSample:
    """One reply graded: its score (length-adjusted when asked), the task's metric dict, every verdict."""

    prompt_id: str
    repeat: int
    response: str
    raw_score: float
    score: float
    metrics: dict[str, float]
    items: list[GradedItem]
    usage: dict[str, Any]
    grader_model: str

    def record(self) -> dict[str, Any]:
        """The sample as `healthbench grade` writes it to results.jsonl (the fields the metrics need, and the
        verdicts with their explanations)."""
        record: dict[str, Any] = {
            "prompt_id": self.prompt_id,
            "repeat": self.repeat,
            "score": self.raw_score,
            "response": self.response,
            "metrics": self.metrics,
            "rubric_items": [item.as_dict() for item in self.items],
            "usage": self.usage,
            "grader_model": self.grader_model,
        }
        if self.score != self.raw_score:
            record["length_adjusted_score"] = self.score
        return record


async def grade_reply(
    grader: Grader,
    row: Row,
    reply: str,
    *,
    repeat: int = 0,
    system_message: str | None = None,
    adjustment: LengthAdjustment | None = None,
) -> GradedSample:
    """Grade one reply to `row` item by item; raises `GradingError` when an item cannot be graded."""
    transcript = transcript_with_reply(row.prompt, reply, system_message)
    graded = await grader.grade(row.prompt_id, transcript, row.rubrics)
    metrics = task_metrics(
        row.example_tags,
        [item.points for item in graded.items],
        [item.tags for item in graded.items],
        [item.criteria_met for item in graded.items],
    )
    raw = metrics["overall_score"]
    return GradedSample(
        prompt_id=row.prompt_id,
        repeat=repeat,
        response=reply,
        raw_score=raw,
        score=raw if adjustment is None else adjustment.adjust(raw, reply),
        metrics=metrics,
        items=graded.items,
        usage=graded.usage.as_dict(),
        grader_model=grader.model,
    )
