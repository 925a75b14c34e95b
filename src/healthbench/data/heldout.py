"""The rows that form a split's `heldout`, read from a file of rows: the official hard file, or any rows of the data
being split (a task file of either schema, or lines holding no more than a `prompt_id`).

Only the ids are read, each matched with a row of the data: one the data lacks is an error naming the file and
the line, so a heldout file of other data is refused before anything is graded or exported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from healthbench.data.loading import first_schema, read_jsonl
from healthbench.data.schema import ID_FIELDS, Row
from healthbench.errors import DataError


class _Ids(BaseModel):
    """A line of a heldout file, read for its id alone (an integer id is its decimal string, as `Row` keeps it)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: StrictStr | StrictInt | None = None
    prompt_id: StrictStr | StrictInt | None = None
    task_id: StrictStr | StrictInt | None = None


def _id_of(line: _Ids, fields: Sequence[str]) -> str | None:
    for name in fields:
        value = getattr(line, name)
        if value is not None:
            return str(value)
    return None


def heldout_rows(path: str | Path, rows: Sequence[Row]) -> list[Row]:
    """The rows of `rows` that the file at `path` names, in the file's order.

    A line's id is its `prompt_id`, or, in a file of HealthBench Professional's schema, the id `Row` takes from it
    (`id`, else `prompt_id`, else `task_id`). A line without one, an id given twice, or an id not among `rows` is a
    `DataError` naming the file and the line.
    """
    path = Path(path)
    fields = ID_FIELDS if first_schema(path) == "professional" else ("prompt_id",)
    by_id = {row.prompt_id: row for row in rows}
    chosen: list[Row] = []
    seen: dict[str, int] = {}
    for number, line in read_jsonl(path, _Ids):
        prompt_id = _id_of(line, fields)
        if prompt_id is None:
            raise DataError(f"{path}:{number}: field {fields[0]}: Field required (the heldout row's id)")
        if prompt_id in seen:
            first = seen[prompt_id]
            raise DataError(f"{path}:{number}: field {fields[0]}: duplicate {prompt_id!r}, first on line {first}")
        seen[prompt_id] = number
        row = by_id.get(prompt_id)
        if row is None:
            raise DataError(
                f"{path}:{number}: field {fields[0]}: heldout {prompt_id!r} is not in the data being split "
                "(a heldout file names rows of the data)"
            )
        chosen.append(row)
    if not chosen:
        raise DataError(f"{path}: no rows")
    return chosen
