"""What is being graded: an official subset by name, or a file of rows, and whose official settings apply to it.

A file in HealthBench Professional's schema is graded as `--subset professional` is, so its kind is told before
the grader settings are built, from the file's first row alone (the rows themselves are loaded later, once).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from healthbench.data.cache import Transfer, file_sha256, unseen
from healthbench.data.loading import Schema, file_schema, load_rows
from healthbench.data.schema import Row
from healthbench.data.subsets import PROFESSIONAL, load_subset, subset_path


@dataclass(frozen=True)
class TaskSource:
    """Rows to grade: a file (`path`) or an official subset (`subset`), with the schema its rows are in."""

    path: Path | None = None
    subset: str | None = None
    schema: Schema = "healthbench"

    @classmethod
    def file(cls, path: str | Path) -> TaskSource:
        """A file of rows; its schema is told from its first row."""
        return cls(path=Path(path), schema=file_schema(path))

    @classmethod
    def named(cls, subset: str) -> TaskSource:
        """An official subset (one of `TASK_SUBSETS`)."""
        return cls(subset=subset, schema="professional" if subset == PROFESSIONAL else "healthbench")

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
        return str(self.path) if self.path is not None else f"subset:{self.subset}"

    def rows(self, transfer: Transfer = unseen) -> list[Row]:
        """The rows, checked (an official subset also against its hash and row count, downloaded on first use
        and shown through `transfer`)."""
        return load_rows(self.path) if self.path is not None else load_subset(self.subset or "full", transfer)

    def sha256(self, transfer: Transfer = unseen) -> str:
        """The sha256 of the file the rows come from: a run's identity includes its data."""
        return file_sha256(self.path if self.path is not None else subset_path(self.subset or "full", transfer))
