"""One graded sample: a reply to a task, graded item by item, with the task's metrics and its scores.

This is the one place a reply becomes a score. `healthbench grade`/`eval`/`baseline`, the OpenReward
environment (its tool and its group scoring), the Inspect task and the verifiers environment all call
`grade_sample`, so they grade the same transcript the same way; `runs.records.SampleRecord.of` is the one
record of it they keep. A reply that
cannot be graded raises `GradingError`: there is no sample, and so no score, for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from healthbench.api.wire import Usage
from healthbench.data.schema import Message, Row
from healthbench.data.tags import AXIS_PREFIX
from healthbench.grading.grader import GradedItem, Grader
from healthbench.grading.prompt import transcript_with_reply
from healthbench.grading.scoring import LengthAdjustment, task_metrics
from healthbench.grading.suspect import suspect


@dataclass(frozen=True)
class GradedSample:
    """A reply graded against its task's rubric.

    `transcript` is the graded conversation (a system message the runner sent, the task's prompt, the reply);
    `score` is the unclipped task score and `adjusted` the unclipped length-adjusted score when an adjustment
    applies; `reward` is whichever of the two is the headline. `suspect` names the rules of `grading.suspect`
    the reply trips (it addresses the grader); it never changes a score. `usage` is what its verdicts cost, those
    reused from a run's store included at what they cost when asked; `paid` what this grading paid (its new calls).
    """

    row: Row
    repeat: int
    transcript: tuple[Message, ...]
    items: tuple[GradedItem, ...]
    metrics: dict[str, float]
    adjusted: float | None
    usage: Usage
    grader_model: str
    paid: Usage
    suspect: tuple[str, ...] = ()

    @property
    def reply(self) -> str:
        """The reply that was graded."""
        return self.transcript[-1].content

    @property
    def score(self) -> float:
        """The unclipped task score."""
        return self.metrics["overall_score"]

    @property
    def axes(self) -> dict[str, float]:
        """The task's per-axis scores (`axis:accuracy`, ...): those of the axes its rubric has items of."""
        return {tag: value for tag, value in self.metrics.items() if tag.startswith(AXIS_PREFIX)}

    @property
    def reward(self) -> float:
        """The headline task score: length-adjusted when an adjustment applies, else the task score."""
        return self.score if self.adjusted is None else self.adjusted


async def grade_sample(
    grader: Grader,
    row: Row,
    reply: str,
    *,
    repeat: int = 0,
    system_message: str | None = None,
    adjustment: LengthAdjustment | None = None,
    transform: str | None = None,
) -> GradedSample:
    """Grade `reply` to `row` (sample `repeat` of it), every rubric item with a call of its own.

    `system_message` is one the runner sent to the model, which heads the graded transcript as in the
    reference. `transform` names a rewrite of the sample's reply (a probe's): its verdicts are kept apart
    from the sample's own, whatever the two replies are. Raises `GradingError` when an item cannot be graded.
    """
    transcript = transcript_with_reply(row.prompt, reply, system_message)
    ident = f"{row.prompt_id}#{repeat}" if transform is None else f"{row.prompt_id}#{repeat}~{transform}"
    graded = await grader.grade(row.prompt_id, transcript, row.rubrics, ident=ident)
    metrics = task_metrics(
        row.example_tags,
        [item.points for item in graded.items],
        [item.tags for item in graded.items],
        [item.criteria_met for item in graded.items],
    )
    adjusted = None if adjustment is None else adjustment.adjust(metrics["overall_score"], reply)
    return GradedSample(
        row=row,
        repeat=repeat,
        transcript=tuple(transcript),
        items=tuple(graded.items),
        metrics=metrics,
        adjusted=adjusted,
        usage=graded.usage,
        grader_model=grader.model,
        paid=graded.paid,
        suspect=suspect(reply, row.rubrics),
    )
