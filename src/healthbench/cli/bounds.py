"""Number flags whose range is their setting's: the range is in the setting's pydantic type (`api.endpoint`'s
`RequestsPerMinute`, `runs.policy.Temperature`, ...), and the flag's click type is read from it, so the command
line and the library refuse the same numbers, and the flag refuses them before anything is built."""

from __future__ import annotations

import math
from typing import Any, get_args

import click
from pydantic.fields import FieldInfo


class _FiniteRange(click.FloatRange):
    """A float range that also refuses inf and nan (click's lets nan through every bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


# pydantic's bound names, as click's range arguments.
_BOUNDS = {"ge": ("min", False), "gt": ("min", True), "le": ("max", False), "lt": ("max", True)}


def bounded(setting: Any) -> click.ParamType[Any]:
    """The flag type of a number setting typed `Annotated[int | float, Field(ge=..., le=...)]`, or of a settings
    model's field of such a type (`ServeLimits.model_fields["reply_chars"]`): its range read from the setting's
    own type, so a flag refuses, before anything is built, what the library's settings would refuse (and says the
    range in `--help`); a float flag refuses inf and nan besides."""
    if isinstance(setting, FieldInfo):
        kind, constraints = setting.annotation, list(setting.metadata)
    else:
        kind, *extras = get_args(setting)
        constraints = [constraint for extra in extras for constraint in getattr(extra, "metadata", ())]
    limits: dict[str, Any] = {}
    for constraint in constraints:
        for name, (side, is_open) in _BOUNDS.items():
            if (value := getattr(constraint, name, None)) is not None:
                limits[side], limits[f"{side}_open"] = value, is_open
    return click.IntRange(**limits) if kind is int else _FiniteRange(**limits)
