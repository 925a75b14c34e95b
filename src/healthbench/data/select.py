"""Choosing `limit` tasks (or samples, or meta-eval rows) as the reference chooses them."""

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
