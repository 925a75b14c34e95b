"""Splits for training: `train`, `validation` and `heldout`, so that a model trained on HealthBench is reported on
tasks it never saw.

The official data: `heldout` is HealthBench Hard (the official hard file's 1,000 conversations, a subset of the
full 5,000), `validation` a seeded, theme-stratified 200 of the other 4,000 (5%), `train` the remaining 3,800. Any
other rows: `heldout` is the rows given as heldout, else a seeded, theme-stratified 20%; `validation` 5% of the
rest, stratified the same way; `train` the rest.

The choice is the same on any machine and in any process: rows are ordered within their theme by the sha256 of
the seed and their prompt_id (never Python's `hash()`, which is salted per process, nor a set's order), and each
theme gives its share by largest remainder, so the splits' sizes are exact. Pure: rows in, rows out, as `Row`s or
as rows read from JSON (the caller's own objects come back).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal, TypeVar, get_args

from healthbench.data.loading import given_row
from healthbench.data.schema import Row
from healthbench.errors import DataError, SettingsError

SplitName = Literal["train", "validation", "heldout"]
SPLITS: tuple[SplitName, ...] = get_args(SplitName)

# The share of the data `heldout` takes when no heldout rows are given (HealthBench Hard is 1,000 of 5,000), and
# the share of the rest that `validation` takes (200 of the official 4,000).
HELDOUT_SHARE = Fraction(1, 5)
VALIDATION_SHARE = Fraction(1, 20)
# The stratum of a row without a `theme:` tag (HealthBench Professional's rows, say).
NO_THEME = ""

# A row as a caller gives it: a `Row`, or a row read from JSON (a mapping in either schema).
RowLike = Row | Mapping[str, Any]
GivenT = TypeVar("GivenT", bound=RowLike)
PartT = TypeVar("PartT")


def theme_of(row: Row) -> str:
    """The row's theme: the value of its first `theme:` example tag, or "" when it has none."""
    for tag in row.example_tags:
        if tag.startswith("theme:"):
            return tag.removeprefix("theme:")
    return NO_THEME


def _order_key(seed: int, prompt_id: str) -> bytes:
    return hashlib.sha256(f"{seed}\n{prompt_id}".encode()).digest()


def _round_half_up(value: Fraction) -> int:
    return int(value + Fraction(1, 2))


def _shares(sizes: dict[str, int], share: Fraction) -> dict[str, int]:
    """How many of each theme's rows a split takes: `share` of the total, rounded half up, given out to the themes
    in proportion to their sizes by largest remainder (ties to the theme first by name)."""
    total = _round_half_up(share * sum(sizes.values()))
    exact = {theme: share * size for theme, size in sizes.items()}
    taken = {theme: int(value) for theme, value in exact.items()}
    by_remainder = sorted(sizes, key=lambda theme: (-(exact[theme] - taken[theme]), theme))
    for theme in by_remainder[: total - sum(taken.values())]:
        taken[theme] += 1
    return taken


def _stratified(rows: Sequence[Row], share: Fraction, seed: int) -> set[str]:
    """The prompt_ids of `share` of `rows`, stratified by theme, each theme's taken first in the seeded order."""
    themes: dict[str, list[Row]] = {}
    for row in rows:
        themes.setdefault(theme_of(row), []).append(row)
    counts = _shares({theme: len(members) for theme, members in themes.items()}, share)
    chosen: set[str] = set()
    for theme, members in themes.items():
        ordered = sorted(members, key=lambda row: _order_key(seed, row.prompt_id))
        chosen.update(row.prompt_id for row in ordered[: counts[theme]])
    return chosen


def _unique_ids(rows: Iterable[Row]) -> list[str]:
    ids: list[str] = []
    seen: set[str] = set()
    for row in rows:
        if row.prompt_id in seen:
            raise DataError(f"prompt_id {row.prompt_id!r} appears twice in the data; a split needs unique ids")
        seen.add(row.prompt_id)
        ids.append(row.prompt_id)
    return ids


def _given(values: Sequence[RowLike], name: str) -> list[Row]:
    return [given_row(value, f"{name}[{index}]") for index, value in enumerate(values)]


def assign_splits(
    rows: Sequence[RowLike], *, heldout: Sequence[RowLike] | None = None, seed: int = 0
) -> dict[str, SplitName]:
    """Each row's split, by prompt_id, in the rows' order: disjoint and covering the rows.

    `rows` are `Row`s (`load_rows`) or rows read from JSON (`json.loads` of a file's lines, in either schema: a
    Professional row's id is its prompt_id), validated as `load_rows` validates a line; a bad one is a `DataError`
    naming its index and field. `heldout`: the rows that form `heldout` (the official hard file's, or any of these
    rows), given alike and matched by prompt_id; one that is not among `rows` is a `DataError` naming it. None: a
    seeded, theme-stratified 20% of the rows. `validation` is 5% of the rest, stratified and seeded alike; `train`
    the remainder.
    """
    given = _given(rows, "rows")
    ids = _unique_ids(given)
    if heldout is None:
        held = _stratified(given, HELDOUT_SHARE, seed)
    else:
        present = set(ids)
        held = set()
        for row in _given(heldout, "heldout"):
            if row.prompt_id not in present:
                raise DataError(f"heldout prompt_id {row.prompt_id!r} is not in the data being split")
            held.add(row.prompt_id)
    rest = [row for row in given if row.prompt_id not in held]
    validation = _stratified(rest, VALIDATION_SHARE, seed)
    return {
        prompt_id: "heldout" if prompt_id in held else "validation" if prompt_id in validation else "train"
        for prompt_id in ids
    }


def check_split(split: str) -> SplitName:
    """`split` as a split's name, or a `SettingsError` naming the ones there are."""
    for name in SPLITS:
        if split == name:
            return name
    raise SettingsError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")


def split_rows(
    rows: Sequence[GivenT], split: SplitName, *, heldout: Sequence[RowLike] | None = None, seed: int = 0
) -> list[GivenT]:
    """The rows of one split, in the rows' order, as they were given (`Row`s, or rows read from JSON: see
    `assign_splits` for what it takes and how the rows are chosen)."""
    name = check_split(split)
    given = _given(rows, "rows")
    assigned = assign_splits(given, heldout=heldout, seed=seed)
    return [value for value, row in zip(rows, given, strict=True) if assigned[row.prompt_id] == name]


def _fewest(share: Fraction) -> int:
    """The fewest rows whose `share`, rounded half up, is one row or more."""
    return math.ceil(Fraction(1, 2) / share)


def why_empty(split: SplitName, sizes: Mapping[SplitName, int]) -> str:
    """Why `split` is empty, for data whose three splits have `sizes`: the share that rounds to none, or a heldout
    that holds every row."""
    total = sum(sizes.values())
    held = sizes.get("heldout", 0)
    if split == "heldout":
        # A heldout file of no rows is refused as it is read: an empty heldout is the seeded share's.
        return (
            f"{float(HELDOUT_SHARE):.0%} of {total} rows rounds to none: a seeded "
            f"heldout needs {_fewest(HELDOUT_SHARE)} rows or more (or a `heldout` file naming the rows)"
        )
    if held == total:
        # Validation takes a twentieth of what heldout leaves, rounded half up, so train is empty only here.
        return (
            f"the heldout rows are all {total} rows of the data, leaving none to train on or validate with (a "
            "`heldout` file names the part of the data kept out of training, not all of it)"
        )
    return (
        f"{float(VALIDATION_SHARE):.0%} of the {total - held} rows outside heldout rounds to none: validation needs "
        f"{_fewest(VALIDATION_SHARE)} or more of them"
    )


def nonempty_split(parts: Mapping[SplitName, Sequence[PartT]], split: SplitName, name: str) -> list[PartT]:
    """The rows of `split` among `parts` (the data named `name`, by split), or a `DataError` naming the data and why
    that split is empty."""
    chosen = list(parts[split])
    if not chosen:
        sizes = {part: len(rows) for part, rows in parts.items()}
        raise DataError(f"{name}: its {split} split is empty: {why_empty(split, sizes)}")
    return chosen
