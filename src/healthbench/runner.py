"""Grading a set of replies and writing the results as they finish.

`results.jsonl` gets one line per task the moment it is graded, so a crash loses at most what was in
flight; a later run on the same folder reuses every line whose reply and grader are unchanged. Metrics are
aggregated in data-file order, so the seeded bootstrap does not depend on which task finished first. If
any task cannot be graded, no `metrics.json` is written: a partial score would be a wrong score.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictStr
from tqdm import tqdm

from .client import Usage
from .data import DataError, Row, read_jsonl
from .grading import GradedReply, Grader, GradingError, transcript_with_reply
from .scoring import aggregate, task_metrics

RESULTS = "results.jsonl"
METRICS = "metrics.json"
RUN = "run.json"


class _ResponseLine(BaseModel):
    model_config = ConfigDict(extra="ignore")
    prompt_id: StrictStr
    response: StrictStr


def load_responses(path: str | Path, known_ids: set[str]) -> dict[str, str]:
    """Read `{"prompt_id", "response"}` JSONL; every problem names the file, line and field."""
    responses: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, entry in read_jsonl(path, _ResponseLine):
        if entry.prompt_id not in known_ids:
            raise DataError(f"{path}:{number}: field prompt_id: {entry.prompt_id!r} is not a task of the data")
        if entry.prompt_id in lines:
            first = lines[entry.prompt_id]
            raise DataError(f"{path}:{number}: field prompt_id: duplicate {entry.prompt_id!r}, first on line {first}")
        lines[entry.prompt_id] = number
        responses[entry.prompt_id] = entry.response
    if not responses:
        raise DataError(f"{path}: no responses")
    return responses


def write_json_atomic(path: Path, value: Any) -> None:
    """Write JSON to a temporary file and rename it over `path`, so readers never see half a file."""
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(value, out, indent=2)
        out.write("\n")
    os.replace(temp, path)


def result_record(
    row: Row, response: str, metrics: Mapping[str, float], graded: GradedReply, grader_model: str
) -> dict[str, Any]:
    """One results.jsonl line."""
    return {
        "prompt_id": row.prompt_id,
        "score": metrics["overall_score"],
        "response": response,
        "metrics": dict(metrics),
        "rubric_items": [item.as_dict() for item in graded.items],
        "usage": graded.usage.as_dict(),
        "grader_model": grader_model,
    }


def _reusable(out_dir: Path, responses: Mapping[str, str], grader_model: str) -> dict[str, dict[str, Any]]:
    """Earlier results in `out_dir` for the same reply and grader; the file is rewritten to hold only them."""
    path = out_dir / RESULTS
    if not path.exists():
        return {}
    kept: dict[str, dict[str, Any]] = {}
    with path.open(encoding="utf-8", newline="\n") as lines:
        records = list(lines)
    for line in records:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line torn by a crash mid-write
        pid = record.get("prompt_id") if isinstance(record, dict) else None
        if (
            isinstance(pid, str)
            and pid in responses
            and record.get("response") == responses[pid]
            and record.get("grader_model") == grader_model
        ):
            kept[pid] = record
    handle, temp = tempfile.mkstemp(dir=out_dir, prefix=f".{RESULTS}.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.writelines(json.dumps(record) + "\n" for record in kept.values())
    os.replace(temp, path)
    return kept


@dataclass
class GradeOutcome:
    """What a grading run produced: metrics only when every task was graded."""

    metrics: dict[str, float | int] | None
    failures: list[GradingError] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    graded: int = 0
    reused: int = 0


async def grade_responses(
    rows: Sequence[Row],
    responses: Mapping[str, str],
    grader: Grader,
    out_dir: Path,
    *,
    seed: int = 0,
    system_message: str | None = None,
    progress: bool = True,
) -> GradeOutcome:
    """Grade `responses[prompt_id]` for each row that has one; write results.jsonl and metrics.json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / METRICS).unlink(missing_ok=True)
    tasks = [row for row in rows if row.prompt_id in responses]
    records = _reusable(out_dir, responses, grader.model)
    outcome = GradeOutcome(metrics=None, reused=len(records))
    todo = [row for row in tasks if row.prompt_id not in records]
    bar = tqdm(total=len(tasks), initial=len(records), unit="task", desc="grading", disable=not progress or None)

    async def one(row: Row) -> None:
        response = responses[row.prompt_id]
        transcript = transcript_with_reply(row.prompt, response, system_message)
        try:
            graded = await grader.grade(row.prompt_id, transcript, row.rubrics)
        except GradingError as exc:
            outcome.failures.append(exc)
            return
        metrics = task_metrics(
            row.example_tags,
            [item.points for item in graded.items],
            [item.tags for item in graded.items],
            [item.criteria_met for item in graded.items],
        )
        record = result_record(row, response, metrics, graded, grader.model)
        results.write(json.dumps(record) + "\n")
        results.flush()
        records[row.prompt_id] = record
        outcome.usage.add(graded.usage)
        outcome.graded += 1
        bar.update()

    with (out_dir / RESULTS).open("a", encoding="utf-8") as results:
        try:
            await asyncio.gather(*(one(row) for row in todo))
        finally:
            bar.close()
    if not outcome.failures:
        outcome.metrics = aggregate([records[row.prompt_id]["metrics"] for row in tasks], seed=seed)
        write_json_atomic(out_dir / METRICS, outcome.metrics)
    return outcome
