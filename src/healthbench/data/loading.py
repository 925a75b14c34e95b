"""Loading a JSONL file of rows: every problem reported with the file, the line and the field, because a 60 MB
file with one bad row is otherwise impossible to fix by hand. The first row tells a file's schema.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import (
    BaseModel,
    ValidationError,
)

from healthbench.data.schema import MetaRow, ProfessionalRow, Row
from healthbench.errors import DataError

Schema = Literal["healthbench", "professional"]
_SCHEMA_NAMES: dict[Schema, str] = {"healthbench": "HealthBench", "professional": "HealthBench Professional"}
RowT = TypeVar("RowT", Row, MetaRow, ProfessionalRow)
ModelT = TypeVar("ModelT", bound=BaseModel)


def _field_name(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(row)"


def schema_of(line: str) -> Schema | None:
    """Which task schema one JSONL line is in, by its keys; None when it is neither or not a JSON object."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if "rubric_items" in value or "conversation" in value:
        return "professional"
    if "rubrics" in value or "prompt" in value:
        return "healthbench"
    return None


def read_jsonl(path: str | Path, model: type[ModelT], *, schema: Schema | None = None) -> Iterator[tuple[int, ModelT]]:
    """Validate each non-blank line of a JSONL file as `model`, yielding (line number, value).

    Lines are split on newlines only: HealthBench text holds U+2028 and other characters that
    `str.splitlines` would treat as line ends. With `schema`, a line that fails because it is a row of the
    other task schema says so, rather than naming the first field it lacks.
    """
    path = Path(path)
    try:
        with path.open("r", encoding="utf-8", newline="\n") as handle:
            for number, line in enumerate(handle, start=1):
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
                            "(the first row sets the schema; a file holds one)"
                        ) from None
                    raise DataError(f"{path}:{number}: field {_field_name(error['loc'])}: {error['msg']}") from None
                yield number, value
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from None


def file_schema(path: str | Path) -> Schema:
    """The task schema of a file, told by its first non-blank line (HealthBench's when that line is neither)."""
    path = Path(path)
    try:
        with path.open("r", encoding="utf-8", newline="\n") as handle:
            for line in handle:
                if line.strip():
                    return schema_of(line) or "healthbench"
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from None
    return "healthbench"


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


def _prompt_id(row: Row) -> tuple[str, str]:
    return "prompt_id", row.prompt_id


def load_rows(path: str | Path) -> list[Row]:
    """Load a task file in either schema, in file order.

    The first non-blank line decides: a row with `rubric_items` or `conversation` makes it a HealthBench
    Professional file (converted as `load_professional_rows` does), anything else a HealthBench file (full,
    hard or consensus). A later row of the other schema is an error naming its line.
    """
    path = Path(path)
    if file_schema(path) == "professional":
        return load_professional_rows(path)
    return _load(Row, path, _prompt_id, "healthbench")


def load_professional_rows(path: str | Path) -> list[Row]:
    """Load a HealthBench Professional file as `Row`s, in file order (see `ProfessionalRow` for the schema)."""
    raw = _load(ProfessionalRow, Path(path), ProfessionalRow.identity, "professional")
    with collection_paused():
        return [row.to_row() for row in raw]


def load_meta_rows(path: str | Path) -> list[MetaRow]:
    """Load a HealthBench meta-evaluation file, in file order."""
    # A completion is judged against several criteria, so no single field is unique here.
    return _load(MetaRow, Path(path), None, None)
