"""Running samples through the policy and the grader, and writing the results as they finish.

Every command that grades (`grade`, `eval`, `baseline`) is a list of jobs run here. Replies and verdicts
are kept in the run's store as they arrive, and `results.jsonl` gets one line per sample the moment it is
graded, so a crash loses at most what was in flight. Metrics are aggregated in a fixed order (repeat,
prompt_id), so the seeded bootstrap depends neither on which task finished first nor on a resume. If any
sample cannot be graded, no `metrics.json` is written: a partial score would be a wrong score.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def select_rows(rows: Sequence[T], limit: int | None) -> list[T]:
    """`limit` items (tasks, samples, meta-eval rows) chosen as the reference chooses them:
    `random.Random(0).sample`, only when fewer than all are asked for."""
    if limit is not None and limit < len(rows):
        return random.Random(0).sample(list(rows), limit)
    return list(rows)
