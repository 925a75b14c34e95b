"""What is being graded: an official subset by name, or a file of rows, and whose official settings apply to it;
and, for training, one split of it (`data.splits`).

A file in HealthBench Professional's schema is graded as `--subset professional` is, so its kind is told before
the grader settings are built, from the file's first row alone (the rows themselves are loaded later, once).

A split is of the full set (its heldout is the official hard file) or of a file (its heldout the rows of a heldout
file, when one is given, else a seeded 20%); the other subsets are not split.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from healthbench.data.cache import Transfer, file_sha256, unseen
from healthbench.data.heldout import heldout_rows
from healthbench.data.loading import Schema, file_schema, load_rows
from healthbench.data.schema import Row
from healthbench.data.splits import SplitName, assign_splits, check_split, nonempty_split
from healthbench.data.subsets import PROFESSIONAL, TASK_SUBSETS, load_subset, subset_path
from healthbench.errors import SettingsError

# The subset whose split is the official one, and the official file that is its heldout.
SPLIT_SUBSET = "full"
HELDOUT_SUBSET = "hard"
# How run.json names an official subset as its data (`subset:full`).
SUBSET_PREFIX = "subset:"


@dataclass(frozen=True)
class TaskSource:
    """Rows to grade: a file (`path`) or an official subset (`subset`), with the schema its rows are in."""

    path: Path | None = None
    subset: str | None = None
    schema: Schema = "healthbench"
    # The split chosen (None: every row), the file of heldout rows for a file's split, and the split's seed.
    split: SplitName | None = None
    heldout: Path | None = None
    split_seed: int = 0

    @classmethod
    def file(cls, path: str | Path) -> TaskSource:
        """A file of rows; its schema is told from its first row."""
        return cls(path=Path(path), schema=file_schema(path))

    @classmethod
    def named(cls, subset: str) -> TaskSource:
        """An official subset (one of `TASK_SUBSETS`)."""
        return cls(subset=subset, schema="professional" if subset == PROFESSIONAL else "healthbench")

    @classmethod
    def given(cls, data: str | Path) -> TaskSource:
        """The data as a library user, `HEALTHBENCH_DATA` and `export`'s `extra_info` name it: a `Path` is a file;
        a string is an official subset by its name (or `subset:NAME`, as run.json names one), else a file's path."""
        if isinstance(data, Path):
            return cls.file(data)
        name = data.removeprefix(SUBSET_PREFIX)
        return cls.named(name) if name in TASK_SUBSETS else cls.file(data)

    @classmethod
    def chosen(
        cls,
        data: str | Path | None = None,
        subset: str | None = None,
        *,
        split: str | None = None,
        heldout: str | Path | None = None,
        seed: int = 0,
    ) -> TaskSource:
        """The tasks a command, an adapter or a reward grades: `data` (see `given`) or `subset` (neither: the full
        set), and of them `split` when one is named (`heldout` and `seed` as `splitting` takes them). The one
        reading of these settings, so every caller refuses the same things: `data` with `subset`, `heldout`
        without `split` (it would choose nothing), and what `splitting` refuses."""
        if data is not None and subset is not None:
            raise SettingsError(f"give `data` or `subset`, not both (data={str(data)!r}, subset={subset!r})")
        if heldout is not None and split is None:
            raise SettingsError("`heldout` goes with `split` (it says which rows form the heldout split)")
        source = cls.given(data) if data is not None else cls.named(subset or SPLIT_SUBSET)
        return source.splitting(split, heldout, seed)

    def splitting(self, split: str | None, heldout: str | Path | None = None, seed: int = 0) -> TaskSource:
        """The same data with a split chosen (or none: `heldout` and `seed` then say how `splits` parts it).

        `SettingsError` for data that is not split (a subset other than the full set), for `heldout` without a
        file of data (the full set's heldout is the official hard file) and for a negative seed."""
        if seed < 0:
            raise SettingsError(f"`split_seed` is {seed}: it must be 0 or more")
        if heldout is not None and self.path is None:
            raise SettingsError(
                f"`heldout` goes with `data` (a file of rows): the {SPLIT_SUBSET} set's heldout is HealthBench Hard, "
                "the official hard file"
            )
        if self.subset is not None and self.subset != SPLIT_SUBSET and (split is not None or heldout is not None):
            raise SettingsError(
                f"`split` splits the {SPLIT_SUBSET} set or a `data` file, not the {self.subset} subset (the "
                f"{SPLIT_SUBSET} set's heldout is HealthBench Hard)"
            )
        return dataclasses.replace(
            self,
            split=None if split is None else check_split(split),
            heldout=None if heldout is None else Path(heldout),
            split_seed=seed,
        )

    @property
    def splittable(self) -> bool:
        """Whether the data has training splits: the full set, or a file."""
        return self.path is not None or self.subset == SPLIT_SUBSET

    @property
    def heldout_name(self) -> str | None:
        """How run.json names the rows that form `heldout`: the heldout file's path, `subset:hard` for the full
        set, None when the heldout is a seeded share of the data (or there is no split)."""
        if self.heldout is not None:
            return str(self.heldout)
        return f"{SUBSET_PREFIX}{HELDOUT_SUBSET}" if self.subset == SPLIT_SUBSET else None

    @property
    def kind(self) -> str | None:
        """The subset whose official settings apply (what `GradingOptions.grader` and the length adjustment take):
        the subset's name, `professional` for a file in Professional's schema, None for any other file."""
        return PROFESSIONAL if self.schema == "professional" else self.subset

    @property
    def professional_file(self) -> bool:
        """Whether this is a file recognised as HealthBench Professional's by its schema."""
        return self.path is not None and self.schema == "professional"

    @property
    def name(self) -> str:
        """How run.json names the data: the file's path, or `subset:NAME`."""
        return str(self.path) if self.path is not None else f"{SUBSET_PREFIX}{self.subset}"

    def all_rows(self, transfer: Transfer = unseen) -> list[Row]:
        """Every row of the data, whatever the split, checked (an official subset also against its hash and row
        count, downloaded on first use and shown through `transfer`)."""
        return load_rows(self.path) if self.path is not None else load_subset(self.subset or "full", transfer)

    def rows(self, transfer: Transfer = unseen) -> list[Row]:
        """The rows of the chosen split (every row when none is), in the data's order; an empty split is a
        `DataError`."""
        rows = self.all_rows(transfer)
        if self.split is None:
            return rows
        return nonempty_split(self.splits(rows, transfer), self.split, self.name)

    def splits(self, rows: list[Row], transfer: Transfer = unseen) -> dict[SplitName, list[Row]]:
        """`rows` (this data's, from `all_rows`) by split, each in the data's order."""
        heldout = None
        if self.heldout is not None:
            heldout = heldout_rows(self.heldout, rows)
        elif self.subset == SPLIT_SUBSET:
            heldout = heldout_rows(subset_path(HELDOUT_SUBSET, transfer), rows)
        assigned = assign_splits(rows, heldout=heldout, seed=self.split_seed)
        parts: dict[SplitName, list[Row]] = {"train": [], "validation": [], "heldout": []}
        for row in rows:
            parts[assigned[row.prompt_id]].append(row)
        return parts

    def sha256(self, transfer: Transfer = unseen) -> str:
        """The sha256 of the file the rows come from: a run's identity includes its data."""
        return file_sha256(self.path if self.path is not None else subset_path(self.subset or "full", transfer))

    def heldout_sha256(self, transfer: Transfer = unseen) -> str | None:
        """The sha256 of the file whose rows form `heldout` (the official hard file for the full set), or None."""
        if self.heldout is not None:
            return file_sha256(self.heldout)
        return file_sha256(subset_path(HELDOUT_SUBSET, transfer)) if self.subset == SPLIT_SUBSET else None
