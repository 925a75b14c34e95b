"""An export folder's manifest: what `healthbench export` split and wrote there, so that a later export into the same
folder is of the same splits or is refused (`integrations.export`).

The manifest names the data (and its sha256), the rows that form `heldout` (and their file's sha256), the split's
seed and the size of each split, and each file written: its split, format, tasks and sha256. It is a hidden file,
`.healthbench-export.json`: Hugging Face `datasets` (what TRL and OpenRLHF load a folder with) passes over hidden
files, where a visible JSON file beside `heldout.jsonl` would be read as rows of the dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal, get_args

from pydantic import Field, ValidationError

from healthbench.data.splits import SplitName
from healthbench.files import write_json
from healthbench.runs.folder import invalid, json_object
from healthbench.runs.records import Record, Versioned

MANIFEST = ".healthbench-export.json"

Format = Literal["trl", "verl", "openrlhf"]
FORMATS: tuple[Format, ...] = get_args(Format)


class ExportOrigin(Record):
    """Where an export's splits come from, what makes two exports' splits the same: the data (an official subset's
    name, or a file's absolute path) and its sha256, the rows that form `heldout` (`subset:hard` for the full set,
    a heldout file's absolute path, None for a seeded share) and their file's sha256, and the split's seed."""

    data: str
    data_sha256: str
    heldout: str | None = None
    heldout_sha256: str | None = None
    seed: int

    def differences(self, other: ExportOrigin) -> list[str]:
        """How `other` (this export's) differs from this origin (a folder's), by content: a data file moved keeps
        its sha256 and is no difference. Settings are named as the library takes them, in backticks."""
        said: list[str] = []
        if other.data_sha256 != self.data_sha256:
            said.append(_changed("data", (self.data, self.data_sha256), (other.data, other.data_sha256)))
        if other.heldout_sha256 != self.heldout_sha256:
            said.append(_changed("heldout", (self.heldout, self.heldout_sha256), (other.heldout, other.heldout_sha256)))
        if other.seed != self.seed:
            said.append(f"`split_seed` {self.seed} there, {other.seed} here")
        return said


def _changed(setting: str, there: tuple[str | None, str | None], here: tuple[str | None, str | None]) -> str:
    """A file setting whose sha256 differs: the same file changed since, or another file."""
    if there[0] == here[0] and there[1] is not None and here[1] is not None:
        return f"`{setting}` {here[0]} changed since (sha256 {there[1][:12]} there, {here[1][:12]} here)"
    return f"`{setting}` {_file(*there)} there, {_file(*here)} here"


def _file(name: str | None, sha256: str | None) -> str:
    if name is None or sha256 is None:
        return "none (a seeded share of the data)"
    return f"{name} (sha256 {sha256[:12]})"


class ExportedFile(Record):
    """One file an export wrote: its name in the folder, its split, format and tasks, and its sha256 (a file whose
    bytes no longer match is checked by its tasks, as a file of no manifest is)."""

    name: str
    split: SplitName
    format: Format
    tasks: int
    sha256: str


class ExportManifest(Versioned):
    """`.healthbench-export.json`: the folder's `origin`, the size of each split of its data, and the files written
    under it, by name."""

    FILE: ClassVar[str] = MANIFEST

    version: Literal[1] = 1
    origin: ExportOrigin
    sizes: dict[SplitName, int]
    files: list[ExportedFile] = Field(default_factory=list)

    def listed(self, name: str) -> ExportedFile | None:
        """The entry of the file `name`, or None when the manifest does not list it."""
        return next((entry for entry in self.files if entry.name == name), None)


def read_manifest(folder: Path) -> ExportManifest | None:
    """The manifest of the export folder `folder`, or None when it has none (a new folder, or one exported before
    manifests existed); a broken one is a `DataError` naming the file and the field."""
    path = folder / MANIFEST
    value = json_object(path)
    if value is None:
        return None
    try:
        return ExportManifest.model_validate(value)
    except ValidationError as exc:
        raise invalid(str(path), exc) from None


def write_manifest(folder: Path, manifest: ExportManifest) -> Path:
    """Write `manifest` into `folder` (atomically); returns its path."""
    return write_json(folder / MANIFEST, manifest.model_dump(mode="json"))
