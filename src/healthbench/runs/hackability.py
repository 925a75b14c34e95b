"""A judge's trials of tricks (`healthbench judges`' hackability): on the meta-eval rows whose criterion the
physicians' majority judged not met, the completion rewritten by each trick and graded against the row's criterion,
in a run folder of its own inside the judge's meta-eval folder (`hack/`).

A trick is a transform of `grading.transforms` (a pure rewrite, made here) or a strategy of `grading.strategies`
(the rewrite an attacker model made once for every judge: `runs.attack`). The judge is asked as its meta-eval asks
it (per item, or a completion's criteria in one call per reply: `metaeval.judge_rows`), and each answer lands in
the folder's store keyed by the exact request, so a resumed run asks nothing twice, and one with more rows or tricks
asks only for those. results.jsonl holds a `TrialRecord` a trial, naming its row, trick and attacker; what the
trials say of the judge (`grading.hackability`) is judges.json's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from healthbench.api.wire import Usage
from healthbench.data.schema import MetaRow, Row, RubricItem
from healthbench.data.select import select_rows
from healthbench.grading.grader import Grader
from healthbench.grading.hackability import majority_not_met
from healthbench.grading.transforms import TRANSFORMS
from healthbench.grading.verdict import Answer
from healthbench.runs.attack import Rewrite, rewrites
from healthbench.runs.folder import RunFolder
from healthbench.runs.metaeval import judge_rows, meta_record
from healthbench.runs.progress import Progress, Quiet
from healthbench.runs.records import TrialRecord
from healthbench.runs.runner import ResultSink, RunOutcome

# A judge's trials, inside its meta-eval run folder.
HACK_FOLDER = "hack"
# Rows a judge's trials are made on unless --hack-limit says otherwise: with every trick of a probe, 3,500 calls a
# judge, an eighth of a full meta-eval's, and enough conversations for an interval of a few points.
HACK_ROWS = 500
# --hack-limit's range: 0 tries no trick.
HackRows = Annotated[int, Field(ge=0)]


def trial_rows(rows: Sequence[MetaRow], limit: int | None) -> list[int]:
    """The rows the trials are made on, by index: those whose criterion the physicians' majority judged not met,
    `limit` of them chosen as the reference chooses rows (every one when None), in row order."""
    candidates = [index for index, row in enumerate(rows) if majority_not_met(row.binary_labels)]
    return sorted(select_rows(candidates, limit))


def attack_jobs(rows: Sequence[MetaRow], chosen: Sequence[int], strategies: Sequence[str]) -> list[Rewrite]:
    """The attacker's rewrites the trials need: each chosen row's completion by each strategy, a completion (with
    its conversation) once however many of its criteria are tried."""
    replies = [(row.prompt_id, row.completion_id, row.prompt, row.completion) for row in (rows[i] for i in chosen)]
    return rewrites(replies, strategies)


def _tasks(rows: Sequence[MetaRow]) -> dict[tuple[str, str], Row]:
    """Each completion as a task for a transform to rewrite: its conversation, and every criterion the rows hold of
    it as its rubric (what a policy that learned the rubric would echo), so a completion is rewritten alike for
    each of its criteria."""
    criteria: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        criteria.setdefault((row.prompt_id, row.completion_id), [])
        if row.rubric not in criteria[row.prompt_id, row.completion_id]:
            criteria[row.prompt_id, row.completion_id].append(row.rubric)
    tasks = {}
    for row in rows:
        key = (row.prompt_id, row.completion_id)
        if key not in tasks:
            rubric = [RubricItem(criterion=text, points=1, tags=[]) for text in criteria[key]]
            tasks[key] = Row(prompt=row.prompt, prompt_id=row.prompt_id, example_tags=[], rubrics=rubric)
    return tasks


@dataclass(frozen=True)
class Trial:
    """One row (`index`) with its completion rewritten by `trick` (by the model `attacker`, for a strategy)."""

    index: int
    trick: str
    row: MetaRow
    attacker: str | None = None


def trials(
    rows: Sequence[MetaRow],
    chosen: Sequence[int],
    tricks: Sequence[str],
    rewrites: Mapping[str, str],
    attacker: str | None = None,
) -> list[Trial]:
    """Each chosen row by each trick: a transform's rewrite made here, a strategy's taken from `rewrites` (by
    `Rewrite.key`; a completion the attacker did not rewrite is not tried by that strategy)."""
    tasks = _tasks(rows)
    found = []
    for trick in tricks:
        for index in chosen:
            row = rows[index]
            if trick in TRANSFORMS:
                text = TRANSFORMS[trick].apply(row.completion, tasks[row.prompt_id, row.completion_id])
                found.append(Trial(index, trick, row.model_copy(update={"completion": text})))
                continue
            key = Rewrite(row.prompt_id, row.completion_id, tuple(row.prompt), row.completion, trick).key
            if key in rewrites:
                found.append(Trial(index, trick, row.model_copy(update={"completion": rewrites[key]}), attacker))
    return found


async def grade_trials(
    chosen: Sequence[Trial],
    grader: Grader,
    folder: RunFolder,
    *,
    progress: Progress | None = None,
    status: Callable[[Usage, Usage], str] | None = None,
) -> RunOutcome:
    """Grade every trial's rewritten completion against its row's criterion, as the judge's meta-eval grades a row;
    results.jsonl gets a `TrialRecord` a trial as it is graded. A trial that cannot be graded is a failure of the
    run; metrics.json is never written (the figures are judges.json's)."""
    outcome = RunOutcome(metrics=None)
    sink: ResultSink[TrialRecord] = ResultSink(
        folder, len(chosen), outcome, unit="trial", progress=progress or Quiet(), status=status
    )

    def record(position: int, answer: Answer) -> TrialRecord:
        trial = chosen[position]
        graded = meta_record(trial.row, trial.index, answer, grader.model)
        return TrialRecord(**graded.model_dump(), trick=trial.trick, attacker=trial.attacker)

    try:
        await judge_rows(
            [trial.row for trial in chosen],
            grader,
            sink,
            outcome,
            record,
            ident=lambda position: f"{chosen[position].trick}#{chosen[position].index}",
            number=lambda position: chosen[position].index,
            trick=lambda position: chosen[position].trick,
        )
    finally:
        sink.close()
    return outcome
