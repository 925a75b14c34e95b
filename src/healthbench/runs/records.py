"""What each line of a run's results.jsonl must hold for the commands that read it back (`report`, `compare`):
checked once, where it is read, so a file that is not a run's results is a `DataError` naming the file, the
result and the field instead of a failure deep in the scoring."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from healthbench.errors import DataError


def _string(value: Any) -> bool:
    return isinstance(value, str)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _number(v) for k, v in value.items())


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _booleans(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, bool) for item in value)


def _objects(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


# Field: (required, check, what it must be).
Rule = tuple[bool, Callable[[Any], bool], str]
GRADED: dict[str, Rule] = {
    "prompt_id": (True, _string, "a string"),
    "score": (True, _number, "a number"),
    "metrics": (True, _numbers, "an object of numbers"),
    "repeat": (False, _whole, "a whole number"),
    "length_adjusted_score": (False, _number, "a number"),
    "response": (False, _string, "a string"),
    "rubric_items": (False, _objects, "a list of objects"),
    "example_tags": (False, _strings, "a list of strings"),
}
META: dict[str, Rule] = {
    "index": (True, _whole, "a whole number"),
    "prompt_id": (True, _string, "a string"),
    "category": (True, _string, "a string"),
    "criteria_met": (True, lambda value: isinstance(value, bool), "true or false"),
    "binary_labels": (True, _booleans, "a list of booleans"),
    "anonymized_physician_ids": (True, _strings, "a list of strings"),
}


def check_results(records: Sequence[Mapping[str, Any]], path: Path, *, meta: bool = False) -> None:
    """`DataError` for the first result (counted from 1) that lacks a field its readers need, or holds one of
    another type: "runs/x/results.jsonl: result 3: field score must be a number (is 'abc')"."""
    rules = META if meta else GRADED
    kind = "a meta-eval run's" if meta else "a graded run's"
    for number, record in enumerate(records, start=1):
        for name, (required, valid, what) in rules.items():
            if name not in record:
                if required:
                    raise DataError(f"{path}: result {number}: no field {name}; is it {kind} results.jsonl?")
                continue
            if not valid(record[name]):
                shown = repr(record[name])
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                raise DataError(f"{path}: result {number}: field {name} must be {what} (is {shown})")
