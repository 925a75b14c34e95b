"""A run's output folder: the names of its files, how each is written and how each is read back.

Every command that grades writes here, and every command that reads a run (`report`, `compare`,
`leaderboard`, `batches`) reads through the same readers, so a file's name, its format and what a missing or
torn file means are decided once:

- `results.jsonl`: one graded sample a line, appended the moment it is graded (a line torn by a crash is
  skipped when read, as a resumed run rewrites the file anyway);
- `metrics.json`: the aggregate, written only once every sample is graded;
- `run.json`: the settings and counts of the run; `usage.json`: tokens and cost;
- `failures.jsonl`: each sample the last session could not grade (which, and why), written with run.json and
  removed by a session without failures, so a report can say what a failed run is missing;
- `progress.sqlite`: the store of replies and verdicts; `report.html`, and a meta-eval's `agreement.json`.

JSON files are written atomically (`files.write_json`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from healthbench.errors import DataError
from healthbench.files import write_atomic, write_json

RESULTS = "results.jsonl"
METRICS = "metrics.json"
RUN = "run.json"
USAGE = "usage.json"
STORE = "progress.sqlite"
REPORT = "report.html"
AGREEMENT = "agreement.json"
FAILURES = "failures.jsonl"


def failure_record(error: Exception, where: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One line of failures.jsonl: which sample (`where`: prompt_id and repeat, when known), the error's
    message, and its rubric item and cause when the error names them."""
    record: dict[str, Any] = dict(where or {})
    for field in ("criterion", "cause"):
        value = getattr(error, field, None)
        if isinstance(value, str):
            record[field] = value
    return record | {"error": str(error)}


@dataclass(frozen=True)
class RunFolder:
    """One run's output folder."""

    path: Path

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def exists(self, name: str) -> bool:
        """Whether the folder holds the file `name`."""
        return (self.path / name).exists()

    def read_results(self) -> list[dict[str, Any]]:
        """The records of results.jsonl, in file order; [] when there is no such file.

        Lines are split on "\\n" only: replies may contain U+2028, which `str.splitlines` would split on.
        A line that is not a JSON object (one torn by a crash mid-write) is skipped.
        """
        return self._read_lines(RESULTS)

    def read_failures(self) -> list[dict[str, Any]]:
        """The records of failures.jsonl (see `failure_record`); [] when the last session had none."""
        return self._read_lines(FAILURES)

    def write_failures(self, records: Sequence[Mapping[str, Any]]) -> None:
        """failures.jsonl, written atomically; removed when there are no failures."""
        if not records:
            self.discard(FAILURES)
            return
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path / FAILURES, "".join(json.dumps(record) + "\n" for record in records))

    def _read_lines(self, name: str) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        try:
            lines = (self.path / name).open(encoding="utf-8", newline="\n")
        except FileNotFoundError:
            return records
        with lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
        return records

    def read_json(self, name: str, *, required: bool = False) -> dict[str, Any]:
        """A JSON object of the folder: {} when the file is absent (an unfinished run), unless `required`;
        a `DataError` naming the file when it is not a JSON object."""
        path = self.path / name
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            if required:
                raise DataError(f"{self.path}: not a finished run ({name} is missing)") from None
            return {}
        except ValueError as exc:
            raise DataError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise DataError(f"{path}: expected a JSON object")
        return value

    def read_run(self, *, required: bool = False) -> dict[str, Any]:
        """run.json."""
        return self.read_json(RUN, required=required)

    def read_metrics(self, *, required: bool = False) -> dict[str, Any]:
        """metrics.json."""
        return self.read_json(METRICS, required=required)

    def read_usage(self) -> dict[str, Any]:
        """usage.json."""
        return self.read_json(USAGE)

    def write(self, name: str, value: Any) -> Path:
        """Write a JSON file of the folder atomically."""
        self.path.mkdir(parents=True, exist_ok=True)
        return write_json(self.path / name, value)

    def discard(self, name: str) -> None:
        """Remove a file an earlier session wrote and this one will write afresh (if at all)."""
        (self.path / name).unlink(missing_ok=True)

    def open_results(self) -> IO[str]:
        """results.jsonl, emptied, for this session to write line by line."""
        self.path.mkdir(parents=True, exist_ok=True)
        return (self.path / RESULTS).open("w", encoding="utf-8")
