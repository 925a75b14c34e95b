"""A run's output folder: the names of its files, and the one place each is written and read back, as the types
of `runs.records`.

Every command that grades writes here, and every command that reads a run (`report`, `compare`,
`leaderboard`, `batches`, a resumed run) reads through the same readers, so a file's name, its format and what a
missing or broken file means are decided once:

- `results.jsonl`: one graded sample a line (`SampleRecord`; `MetaRecord` for a meta-eval, `TrialRecord` for a
  judge's hackability run, `RewriteRecord` for an attacker's rewrites), appended the moment it is done. A line
  that cannot be read stops the reader with the file, the line and the field, and so does a line whose sample
  (task, repeat and a probe's transform; a meta-eval's row index; a trial's row and trick; a rewrite's reply and
  strategy) an earlier line holds: every reader reads the file alike. Only a last line cut short by a crash
  mid-write (no newline at its end) is passed over, as the next session rewrites the file anyway (from its store:
  a resumed run never reads it);
- `metrics.json`: the aggregate, written only once every sample is graded: the reference's keys, plain numbers;
- `run.json` (`RunRecord`: the spec and the last session's counts), `usage.json` (`UsageRecord`);
- `failures.jsonl` (`FailureRecord`): each sample the last session could not grade, written with run.json and
  removed by a session without failures, so a report can say what a failed run is missing;
- `progress.sqlite`: the store of replies and verdicts (and `progress.sqlite.reserve`, the room it keeps for its
  last commit on a disk that fills up); `report.html`, and a meta-eval's `agreement.json` (`AgreementRecord`);
- `writer.lock`: the lock a live run holds on the folder (`runs.lock`), with its pid;
- a probe's `probe.json` (`ProbeRecord`: what each transform gains) and `probe.html`;
- in the folder `healthbench judges` writes (its --out, which holds a meta-eval run folder per grader),
  `judges.json` (`runs.judges.JudgesRecord`: the graders side by side) and `judges.html`.

JSON files are written atomically (`files.write_json`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import BaseModel, ValidationError

from healthbench.errors import DataError
from healthbench.files import unusable, write_atomic, write_json
from healthbench.runs.judges import JudgesRecord
from healthbench.runs.records import (
    AgreementRecord,
    FailureRecord,
    MetaRecord,
    Metrics,
    ProbeRecord,
    Record,
    RewriteRecord,
    RunRecord,
    SampleRecord,
    TrialRecord,
    UsageRecord,
)

RESULTS = "results.jsonl"
METRICS = "metrics.json"
RUN = "run.json"
USAGE = "usage.json"
STORE = "progress.sqlite"
REPORT = "report.html"
AGREEMENT = "agreement.json"
FAILURES = "failures.jsonl"
PROBE = "probe.json"
PROBE_PAGE = "probe.html"
JUDGES = "judges.json"
JUDGES_PAGE = "judges.html"

RecordT = TypeVar("RecordT", bound=BaseModel)
FileT = TypeVar("FileT", bound=Record)
ValueT = TypeVar("ValueT")

# The JSON files that hold one record each, by the record's type: `RunFolder.read` and `RunFolder.write`.
_FILES: dict[type[Record], str] = {
    RunRecord: RUN,
    UsageRecord: USAGE,
    ProbeRecord: PROBE,
    AgreementRecord: AGREEMENT,
    JudgesRecord: JUDGES,
}


def invalid(where: str, exc: ValidationError, hint: str = "", *, flat: bool = False) -> DataError:
    """A record that does not validate, said as "FILE: line 3: field score: Input should be a valid number"; a
    `flat` record (run.json of version 1) names its fields as that file does, without the part they move to."""
    error = exc.errors(include_url=False)[0]
    loc = error["loc"][1:] if flat and error["loc"] else error["loc"]
    field = ".".join(str(part) for part in loc) or "(record)"
    missing = hint if error["type"] == "missing" else ""
    return DataError(f"{where}: field {field}: {error['msg']}{missing}")


def json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object the file `path` holds, or None when there is no such file; a file that holds no JSON object
    is a `DataError` naming it."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise DataError(f"{path}: expected a JSON object")
    return value


@dataclass(frozen=True)
class RunFolder:
    """One run's output folder."""

    path: Path

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def exists(self, name: str) -> bool:
        """Whether the folder holds the file `name`."""
        return (self.path / name).exists()

    # results.jsonl

    def read_results(self) -> list[SampleRecord]:
        """The graded samples of results.jsonl, in file order; [] when there is no such file. A sample on two
        lines is a `DataError` naming the second."""
        records = self._records(RESULTS, SampleRecord, "; is it a graded run's results.jsonl?")
        return self._once(records, lambda r: (r.prompt_id, r.repeat, r.transform), _sample_words)

    def read_meta_results(self) -> list[MetaRecord]:
        """The graded rows of a meta-eval's results.jsonl, in file order; [] when there is no such file. A row on
        two lines is a `DataError` naming the second."""
        records = self._records(RESULTS, MetaRecord, "; is it a meta-eval run's results.jsonl?")
        return self._once(records, lambda r: r.index, lambda r: f"row {r.index}")

    def read_trials(self) -> list[TrialRecord]:
        """The trials of a judge's hackability run's results.jsonl, in file order; [] when there is no such file. A
        trial (row and trick) on two lines is a `DataError` naming the second."""
        records = self._records(RESULTS, TrialRecord, "; is it a judge's hackability run's results.jsonl?")
        return self._once(records, lambda r: (r.index, r.trick), lambda r: f"row {r.index} rewritten by {r.trick}")

    def read_rewrites(self) -> list[RewriteRecord]:
        """The rewrites of an attack run's results.jsonl, in file order; [] when there is no such file. A rewrite
        (reply and strategy) on two lines is a `DataError` naming the second."""
        records = self._records(RESULTS, RewriteRecord, "; is it an attack run's results.jsonl?")
        return self._once(records, lambda r: r.key, lambda r: f"the {r.strategy} rewrite of {r.prompt_id!r}")

    def _once(
        self,
        records: Iterable[tuple[int, RecordT]],
        key: Callable[[RecordT], Hashable],
        words: Callable[[RecordT], str],
    ) -> list[RecordT]:
        """The records, each sample once; a second line of one is refused with both lines."""
        first: dict[Hashable, int] = {}
        found = []
        for number, record in records:
            seen = first.setdefault(key(record), number)
            if seen != number:
                raise DataError(
                    f"{self.path / RESULTS}: line {number}: {words(record)} appears twice (first on line {seen}); "
                    "a run writes each sample once: were two runs writing this folder at once?"
                )
            found.append(record)
        return found

    def count_results(self) -> int:
        """How many lines results.jsonl holds (samples graded so far), without reading them as records."""
        try:
            with (self.path / RESULTS).open("rb") as lines:
                return sum(1 for line in lines if line.strip())
        except FileNotFoundError:
            return 0

    def open_results(self) -> ResultsWriter:
        """results.jsonl, emptied, for this session to write record by record."""
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            return ResultsWriter((self.path / RESULTS).open("w", encoding="utf-8"), self.path / STORE)
        except OSError as exc:
            raise unusable(self.path / RESULTS, exc, self.path / STORE) from None

    def _records(self, name: str, model: type[RecordT], hint: str) -> Iterator[tuple[int, RecordT]]:
        """Each line of a JSONL file of the folder as `model`, with its line number. Lines are split on "\\n"
        only: replies may contain U+2028, which `str.splitlines` would split on."""
        path = self.path / name
        try:
            handle = path.open(encoding="utf-8", newline="\n")
        except FileNotFoundError:
            return
        with handle:
            try:
                for number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        yield number, model.model_validate_json(line)
                    except ValidationError as exc:
                        if not line.endswith("\n") and exc.errors()[0]["type"] == "json_invalid":
                            return  # the last line, cut short by a crash while it was written
                        if exc.errors()[0]["type"] == "json_invalid":
                            raise DataError(f"{path}: line {number}: not a JSON object") from None
                        raise invalid(f"{path}: line {number}", exc, hint) from None
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from None

    # failures.jsonl

    def read_failures(self) -> list[FailureRecord]:
        """The failures of the last session (see `FailureRecord`); [] when it had none."""
        return [record for _, record in self._records(FAILURES, FailureRecord, "")]

    def write_failures(self, records: Sequence[FailureRecord]) -> None:
        """failures.jsonl, written atomically; removed when there are no failures."""
        if not records:
            self.discard(FAILURES)
            return
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(
            self.path / FAILURES, "".join(record.model_dump_json(exclude_none=True) + "\n" for record in records)
        )

    # run.json, usage.json, probe.json, agreement.json, judges.json: one record each

    def read(self, model: type[FileT]) -> FileT | None:
        """The file of the record type `model` (`RunRecord`: run.json, `UsageRecord`: usage.json, `ProbeRecord`: a
        probe's probe.json, `AgreementRecord`: a meta-eval's agreement.json, `JudgesRecord`: `judges`' judges.json),
        or None when there is none (a first session that never ended, a probe or meta-eval not finished, `judges`
        not run there yet); a broken one is a `DataError` naming the field.
        A run.json without a `version` key is flat (version 1 of any release), and an error names its fields as that
        file does."""
        name = _FILES[model]
        value = self._json(name)
        if value is None:
            return None
        try:
            return model.model_validate(value)
        except ValidationError as exc:
            raise invalid(str(self.path / name), exc, flat=name == RUN and "version" not in value) from None

    def write(self, record: Record) -> Path:
        """The file of `record`'s type (see `read`), holding it."""
        return self._write(_FILES[type(record)], record.model_dump(mode="json"))

    def read_run(self) -> RunRecord | None:
        """run.json of any release, or None when there is none (a first session that never ended)."""
        return self.read(RunRecord)

    def require_run(self) -> RunRecord:
        """run.json, or a `DataError` saying the folder holds no finished run."""
        return self._required(RUN, self.read_run())

    def unfinished(self, run: RunRecord | None) -> str | None:
        """Why the folder, whose run.json is `run`, is not a finished run ("not a finished run (3 samples could not
        be graded)"), or None when it is one."""
        if run is None:
            return _missing(RUN)
        for count, why in ((run.stats.failed, "could not be graded"), (run.stats.deferred, "waiting on batches")):
            if count:
                return f"not a finished run ({count} sample{'s' if count != 1 else ''} {why})"
        if not self.exists(METRICS):
            return _missing(METRICS)
        return None

    # metrics.json

    def read_metrics(self) -> Metrics | None:
        """metrics.json, or None when there is none (a run not finished)."""
        value = self._json(METRICS)
        if value is None:
            return None
        numbers = {k: v for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        if len(numbers) != len(value):
            wrong = next(k for k in value if k not in numbers)
            raise DataError(f"{self.path / METRICS}: field {wrong}: expected a number, got {value[wrong]!r}")
        return {name: float(number) if isinstance(number, float) else number for name, number in numbers.items()}

    def require_metrics(self) -> Metrics:
        """metrics.json, or a `DataError` saying the folder holds no finished run."""
        return self._required(METRICS, self.read_metrics())

    def write_metrics(self, metrics: Metrics) -> Path:
        """metrics.json: the reference's keys and numbers, nothing else."""
        return self._write(METRICS, metrics)

    def _required(self, name: str, value: ValueT | None) -> ValueT:
        """`value`, read from the file `name`, or a `DataError` saying the folder holds no finished run."""
        if value is None:
            raise DataError(f"{self.path}: {_missing(name)}")
        return value

    def _json(self, name: str) -> dict[str, Any] | None:
        return json_object(self.path / name)

    def _write(self, name: str, value: Any) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        return write_json(self.path / name, value)

    def discard(self, name: str) -> None:
        """Remove a file an earlier session wrote and this one will write afresh (if at all)."""
        (self.path / name).unlink(missing_ok=True)


def _missing(name: str) -> str:
    return f"not a finished run ({name} is missing)"


def _sample_words(record: SampleRecord) -> str:
    rewritten = "" if record.transform is None else f" rewritten by {record.transform}"
    return f"sample {record.prompt_id!r} repeat {record.repeat}{rewritten}"


class ResultsWriter:
    """results.jsonl of this session: a line per record, flushed as it is written. A line that cannot be written
    (a full disk) is `OutputUnusable` (`DiskFull`), naming the file and the `store` that keeps the run's answers:
    the next session writes the file afresh from it."""

    def __init__(self, handle: IO[str], store: Path) -> None:
        self._handle = handle
        self._store = store

    def write(self, record: Record) -> None:
        """Append one record."""
        try:
            self._handle.write(record.model_dump_json(exclude_none=True) + "\n")
            self._handle.flush()
        except OSError as exc:
            raise unusable(Path(self._handle.name), exc, self._store) from None

    def close(self) -> None:
        """Close the file (a line it could not write was said by `write`)."""
        with contextlib.suppress(OSError):
            self._handle.close()
