"""Physician baselines (docs/SPEC.md section 5): the completions physicians wrote, graded like a model's replies.

Rows carry `ideal_completions_data` from one of three groups of physicians: Group 1 wrote without seeing any
model's reply; Groups 2 and 3 were shown four reference completions from models of Aug/Sep 2024 and Apr 2025
and improved on them. A baseline grades either the physicians' ideal completions of one group, or the four
reference completions they were shown (Groups 2 and 3 only), through the same runner as any other replies.
The rows, the expansion into one sample per reference, and the `--limit` draw are those of the reference's
`HealthBenchEval` in physician-completions mode, so its samples and metrics are reproduced exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from healthbench.data.schema import Row
from healthbench.data.select import select_rows
from healthbench.errors import DataError, SettingsError
from healthbench.runs.runner import Job

REFERENCES_PER_ROW = 4
GROUP_DESCRIPTIONS = {
    1: "no reference completions were shown to the physicians",
    2: "physicians were shown reference completions from Aug/Sep 2024 models (gpt-4o-2024-08-06, o1-preview)",
    3: "physicians were shown reference completions from Apr 2025 models (o3, gpt-4.1)",
}


def group_name(group: int) -> str:
    """The value of `ideal_completions_group` for a group number: `"Group 3"` for 3."""
    if group not in GROUP_DESCRIPTIONS:
        raise SettingsError(f"there is no physician group {group}; the groups are 1, 2 and 3")
    return f"Group {group}"


def baseline_jobs(rows: Sequence[Row], group: int, *, references: bool = False, limit: int | None = None) -> list[Job]:
    """The samples of a physician baseline, in the reference's order, as jobs with fixed replies.

    Without `references`, one job per row of the group whose reply is the physician's ideal completion. With
    `references`, one job per reference completion, its index (0-3) as the job's repeat, so that results pair
    by (prompt_id, repeat). `limit` draws that many samples from this list with `random.Random(0).sample`, as
    the reference draws from its expanded example list (so one row may keep only some of its references).
    """
    name = group_name(group)
    if references and group == 1:
        raise SettingsError("Group 1 physicians were shown no reference completions; `references` needs group 2 or 3")
    matching = [
        (row, row.ideal_completions_data)
        for row in rows
        if row.ideal_completions_data is not None and row.ideal_completions_data.ideal_completions_group == name
    ]
    if not matching:
        raise DataError(f"no row has physician completions of {name}")
    jobs: list[Job] = []
    for row, ideal in matching:
        if not references:
            jobs.append(Job(row, 0, ideal.ideal_completion))
            continue
        completions = ideal.ideal_completions_ref_completions
        if len(completions) != REFERENCES_PER_ROW:
            raise DataError(
                f"row {row.prompt_id}: {name} rows have {REFERENCES_PER_ROW} reference completions, "
                f"this one has {len(completions)}"
            )
        jobs.extend(Job(row, index, completion) for index, completion in enumerate(completions))
    return select_rows(jobs, limit)


def physician_jobs(rows: Sequence[Row], *, limit: int | None = None) -> list[Job]:
    """HealthBench Professional's physician baseline: each row's `physician_response` as a fixed reply, in
    file order (`limit` drawn as the reference draws); rows without one are left out."""
    jobs = [Job(row, 0, row.physician_response) for row in rows if row.physician_response is not None]
    if not jobs:
        raise DataError("no row has a physician_response to grade")
    return select_rows(jobs, limit)
