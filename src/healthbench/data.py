"""HealthBench rows: the official JSONL schema, validated on load.

Every problem in a file is reported with the file, the line and the field, because a 60 MB file with one bad
row is otherwise impossible to fix by hand.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError


class DataError(ValueError):
    """A data file that cannot be used as HealthBench data; the message names file, line and field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Message(_Model):
    """One conversation turn."""

    role: Literal["system", "user", "assistant"]
    content: StrictStr


class RubricItem(_Model):
    """One physician-written criterion; negative points mark undesirable behaviour."""

    criterion: StrictStr
    points: StrictInt
    tags: list[StrictStr]


class IdealCompletions(_Model):
    """Physician-written replies, present on some rows."""

    ideal_completion: StrictStr
    ideal_completions_group: Literal["Group 1", "Group 2", "Group 3"]
    ideal_completions_ref_completions: list[StrictStr] = Field(default_factory=list)


class Row(_Model):
    """One HealthBench task: a conversation ending on a user turn and its rubric."""

    prompt: list[Message] = Field(min_length=1)
    prompt_id: StrictStr
    example_tags: list[StrictStr]
    rubrics: list[RubricItem] = Field(min_length=1)
    ideal_completions_data: IdealCompletions | None = None

    def problem(self) -> tuple[str, str] | None:
        """The first semantic problem of this row as (field, message), or None if it is usable."""
        if self.prompt[-1].role != "user":
            return "prompt", f"must end on a user turn, ends on {self.prompt[-1].role!r}"
        if not any(item.points > 0 for item in self.rubrics):
            return "rubrics", "no item has positive points, so the row has no score"
        return None


class MetaRow(_Model):
    """One meta-evaluation row: a completion, one consensus criterion, and physicians' binary labels."""

    prompt: list[Message] = Field(min_length=1)
    completion: StrictStr
    rubric: StrictStr
    category: StrictStr
    binary_labels: list[StrictBool] = Field(min_length=1)
    anonymized_physician_ids: list[StrictStr]
    prompt_id: StrictStr
    completion_id: StrictStr

    def problem(self) -> tuple[str, str] | None:
        """The first semantic problem of this row as (field, message), or None if it is usable."""
        if len(self.anonymized_physician_ids) != len(self.binary_labels):
            return "anonymized_physician_ids", "must have one id per binary label"
        return None


RowT = TypeVar("RowT", Row, MetaRow)
ModelT = TypeVar("ModelT", bound=BaseModel)


def _field_name(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(row)"


def read_jsonl(path: str | Path, model: type[ModelT]) -> Iterator[tuple[int, ModelT]]:
    """Validate each non-blank line of a JSONL file as `model`, yielding (line number, value).

    Lines are split on newlines only: HealthBench text holds U+2028 and other characters that
    `str.splitlines` would treat as line ends.
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
                    raise DataError(f"{path}:{number}: field {_field_name(error['loc'])}: {error['msg']}") from None
                yield number, value
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from None


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


def _load(model: type[RowT], path: Path, id_key: str | None) -> list[RowT]:
    with collection_paused():
        return _load_rows(model, path, id_key)


def _load_rows(model: type[RowT], path: Path, id_key: str | None) -> list[RowT]:
    rows: list[RowT] = []
    seen: dict[Any, int] = {}
    for number, row in read_jsonl(path, model):
        problem = row.problem()
        if problem is not None:
            raise DataError(f"{path}:{number}: field {problem[0]}: {problem[1]}")
        if id_key is not None:
            key = getattr(row, id_key)
            if key in seen:
                raise DataError(f"{path}:{number}: field {id_key}: duplicate {key!r}, first on line {seen[key]}")
            seen[key] = number
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def load_rows(path: str | Path) -> list[Row]:
    """Load a HealthBench task file (full, hard or consensus schema), in file order."""
    return _load(Row, Path(path), "prompt_id")


def load_meta_rows(path: str | Path) -> list[MetaRow]:
    """Load a HealthBench meta-evaluation file, in file order."""
    # A completion is judged against several criteria, so no single field is unique here.
    return _load(MetaRow, Path(path), None)
