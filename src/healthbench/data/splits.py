"""STAND-IN until branch `split` lands (AREAS.md's contract): removed before its commit is cherry-picked."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal, get_args

from healthbench.data.schema import Row

SplitName = Literal["train", "validation", "heldout"]
SPLITS: tuple[SplitName, ...] = get_args(SplitName)


def assign_splits(rows: Sequence[Row], *, heldout: Sequence[Row] | None = None, seed: int = 0) -> dict[str, SplitName]:
    """Each row's split by prompt_id (a stand-in: seeded by hash, not stratified)."""
    held = {row.prompt_id for row in heldout} if heldout is not None else None
    out: dict[str, SplitName] = {}
    for row in rows:
        digit = hashlib.sha256(f"{seed}\n{row.prompt_id}".encode()).digest()[0] % 20
        in_held = row.prompt_id in held if held is not None else digit < 4
        out[row.prompt_id] = "heldout" if in_held else "validation" if digit == 19 else "train"
    return out


def split_rows(
    rows: Sequence[Row], split: SplitName, *, heldout: Sequence[Row] | None = None, seed: int = 0
) -> list[Row]:
    """The rows of one split."""
    assigned = assign_splits(rows, heldout=heldout, seed=seed)
    return [row for row in rows if assigned[row.prompt_id] == split]
