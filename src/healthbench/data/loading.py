"""Loading a JSONL file of rows: every problem reported with the file, the line and the field, because a 60 MB
file with one bad row is otherwise impossible to fix by hand. The first row tells a file's schema, so a file of
the wrong kind (a meta-evaluation file given as tasks, or the reverse) is named as such. A byte-order mark at
the start of a file, as some Windows editors write, is read past.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ValidationError,
)

from healthbench.data.schema import MetaRow, ProfessionalRow, Row
from healthbench.errors import DataError

Schema = Literal["healthbench", "professional", "meta"]
_SCHEMA_NAMES: dict[Schema, str] = {
    "healthbench": "HealthBench",
    "professional": "HealthBench Professional",
    "meta": "HealthBench meta-evaluation",
}
# utf-8-sig reads a leading byte-order mark as nothing, and is plain UTF-8 otherwise.
ENCODING = "utf-8-sig"
RowT = TypeVar("RowT", Row, MetaRow, ProfessionalRow)
ModelT = TypeVar("ModelT", bound=BaseModel)


def _field_name(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(row)"


def schema_of(line: str) -> Schema | None:
    """Which schema one JSONL line is in, by its keys (a meta-evaluation row's `rubric` and `binary_labels`
    first, since it also has a `prompt`); None when it is none of them or not a JSON object."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value_schema(value)


def value_schema(value: object) -> Schema | None:
    """Which schema a row read from JSON is in, by its keys, as `schema_of` tells a line's; None when it is none of
    them or not a mapping."""
    if not isinstance(value, Mapping):
        return None
    if "rubric_items" in value or "conversation" in value:
        return "professional"
    if "binary_labels" in value or ("rubric" in value and "completion" in value):
        return "meta"
    if "rubrics" in value or "prompt" in value:
        return "healthbench"
    return None


def read_jsonl(path: str | Path, model: type[ModelT], *, schema: Schema | None = None) -> Iterator[tuple[int, ModelT]]:
    """Validate each non-blank line of a JSONL file as `model`, yielding (line number, value).

    Lines are split on newlines only: HealthBench text holds U+2028 and other characters that
    `str.splitlines` would treat as line ends. With `schema`, a line that fails because it is a row of
    another schema says so, rather than naming the first field it lacks.
    """
    path = Path(path)
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                line = _decoded(path, number, raw)
                if not line.strip():
                    continue
                try:
                    value = model.model_validate_json(line)
                except ValidationError as exc:
                    error = exc.errors(include_url=False)[0]
                    if error["type"] == "json_invalid":
                        raise DataError(f"{path}:{number}: invalid JSON ({error['msg']})") from None
                    found = schema_of(line) if schema is not None else None
                    if schema is not None and found is not None and found != schema:
                        raise DataError(
                            f"{path}:{number}: a {_SCHEMA_NAMES[found]} row in a {_SCHEMA_NAMES[schema]} file "
                            "(a file holds rows of one kind)"
                        ) from None
                    raise DataError(f"{path}:{number}: field {_field_name(error['loc'])}: {error['msg']}") from None
                yield number, value
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None


def _decoded(path: Path, number: int, raw: bytes) -> str:
    """One line of a JSONL file as text (a first line's byte-order mark read as nothing); a line that is not
    UTF-8 is a `DataError` naming the file, the line and the byte. A binary file is read line by line, split on
    "\\n" alone, so every line has its number even when one of them cannot be decoded."""
    try:
        return raw.decode(ENCODING if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}:{number}: not UTF-8 text ({exc.reason} at byte {exc.start + 1} of the line)") from None


def first_schema(path: str | Path) -> Schema | None:
    """The schema of a file's first non-blank line (read alone: the rest of the file is not), or None when that
    line is in none of them or the file has no rows."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                line = _decoded(path, number, raw)
                if line.strip():
                    return schema_of(line)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    return None


def file_schema(path: str | Path) -> Schema:
    """The schema of a file, told by its first non-blank line (HealthBench's when that line is in none)."""
    return first_schema(path) or "healthbench"


def wrong_kind(path: Path, found: Schema, wanted: str, takes: str) -> DataError:
    """The error for a file of another kind than the command reads: what it is, told from its first row."""
    kind = _SCHEMA_NAMES[found] + ("" if found == "meta" else " task")
    return DataError(f"{path}: a {kind} file (told from its first row), not a {wanted} file; {takes} takes it")


@contextmanager
def collection_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while rows are built.

    Rows hold no reference cycles, yet every few thousand allocations the collector would rescan the whole
    growing heap: that is three quarters of the time it takes to load the full set.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


IdOf = Callable[[RowT], tuple[str, str] | None]


def _load(model: type[RowT], path: Path, id_of: IdOf[RowT] | None, schema: Schema | None) -> list[RowT]:
    with collection_paused():
        return _load_rows(model, path, id_of, schema)


def _load_rows(model: type[RowT], path: Path, id_of: IdOf[RowT] | None, schema: Schema | None) -> list[RowT]:
    rows: list[RowT] = []
    seen: dict[str, int] = {}
    for number, row in read_jsonl(path, model, schema=schema):
        problem = row.problem()
        if problem is not None:
            raise DataError(f"{path}:{number}: field {problem[0]}: {problem[1]}")
        identity = id_of(row) if id_of is not None else None
        if identity is not None:
            field, key = identity
            if key in seen:
                raise DataError(f"{path}:{number}: field {field}: duplicate {key!r}, first on line {seen[key]}")
            seen[key] = number
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def given_row(value: Row | Mapping[str, Any], where: str) -> Row:
    """A task row given in code: a `Row` as it is, or a mapping holding a row as a line of a file does (what
    `json.loads` reads from it, in either schema), validated as `load_rows` validates that line. Anything else, a
    meta-evaluation row, or a row that `load_rows` would refuse is a `DataError` naming `where` ("rows[3]") and the
    field."""
    if isinstance(value, Row):
        return value
    if not isinstance(value, Mapping):
        raise DataError(
            f"{where}: a value of type {type(value).__name__}, not a row (give `Row`s, as `load_rows` reads them, or "
            "rows as `json.loads` reads the lines of a file)"
        )
    schema = value_schema(value)
    if schema == "meta":
        raise DataError(f"{where}: a {_SCHEMA_NAMES[schema]} row, not a task row")
    model: type[Row | ProfessionalRow] = ProfessionalRow if schema == "professional" else Row
    try:
        row = model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise DataError(f"{where}: field {_field_name(error['loc'])}: {error['msg']}") from None
    problem = row.problem()
    if problem is not None:
        raise DataError(f"{where}: field {problem[0]}: {problem[1]}")
    return row.to_row() if isinstance(row, ProfessionalRow) else row


def _prompt_id(row: Row) -> tuple[str, str]:
    return "prompt_id", row.prompt_id


def load_rows(path: str | Path) -> list[Row]:
    """Load a task file in either schema, in file order.

    The first non-blank line decides: a row with `rubric_items` or `conversation` makes it a HealthBench
    Professional file (converted as `load_professional_rows` does), a meta-evaluation row is refused as the
    wrong kind of file, anything else makes it a HealthBench file (full, hard or consensus). A later row of
    another schema is an error naming its line.
    """
    path = Path(path)
    schema = file_schema(path)
    if schema == "meta":
        raise wrong_kind(path, schema, "HealthBench task", "meta-eval")
    if schema == "professional":
        return load_professional_rows(path)
    return _load(Row, path, _prompt_id, "healthbench")


def load_professional_rows(path: str | Path) -> list[Row]:
    """Load a HealthBench Professional file as `Row`s, in file order (see `ProfessionalRow` for the schema)."""
    raw = _load(ProfessionalRow, Path(path), ProfessionalRow.identity, "professional")
    with collection_paused():
        return [row.to_row() for row in raw]


def load_meta_rows(path: str | Path) -> list[MetaRow]:
    """Load a HealthBench meta-evaluation file, in file order; a task file is refused as one."""
    path = Path(path)
    found = first_schema(path)
    if found is not None and found != "meta":
        raise wrong_kind(path, found, "meta-evaluation", "grade, eval or baseline")
    # A completion is judged against several criteria, so no single field is unique here.
    return _load(MetaRow, path, None, "meta")
