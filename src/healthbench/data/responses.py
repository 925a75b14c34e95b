"""Fixed replies to grade (`healthbench grade --responses`): `{"prompt_id", "response"}` a line."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, StrictStr

from healthbench.data.loading import read_jsonl
from healthbench.errors import DataError


class _ResponseLine(BaseModel):
    model_config = ConfigDict(extra="ignore")
    prompt_id: StrictStr
    response: StrictStr


def load_responses(path: str | Path, known_ids: set[str], *, strict: bool = True) -> dict[str, str]:
    """Read `{"prompt_id", "response"}` JSONL; every problem names the file, line and field.

    Every reply is returned, and the caller grades those that name a task in `known_ids`: replies for the
    full set graded on a subset of it is the common case. `strict` refuses a reply naming any other task;
    either way, replies of which none names a known task are refused.
    """
    responses: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, entry in read_jsonl(path, _ResponseLine):
        if strict and entry.prompt_id not in known_ids:
            raise DataError(f"{path}:{number}: field prompt_id: {entry.prompt_id!r} is not a task of the data")
        if entry.prompt_id in lines:
            first = lines[entry.prompt_id]
            raise DataError(f"{path}:{number}: field prompt_id: duplicate {entry.prompt_id!r}, first on line {first}")
        lines[entry.prompt_id] = number
        responses[entry.prompt_id] = entry.response
    if not responses:
        raise DataError(f"{path}: no responses")
    if known_ids.isdisjoint(responses):
        named = next(iter(lines))
        raise DataError(
            f"{path}: none of its {len(responses)} replies names one of the data's {len(known_ids)} tasks "
            f"(line {lines[named]}: field prompt_id: {named!r} is not a task of the data)"
        )
    return responses
