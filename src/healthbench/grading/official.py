"""HealthBench Professional's official configuration (docs/SPEC.md section 7), and how a run's settings differ from it.

A Professional run is official only with the whole bundle: gpt-5.4 at low effort through the Responses API,
and the length adjustment of center 2000 and 0.0147 per 500 characters. The differences are data (the setting,
the run's value, the official value), recorded in run.json (`runs.spec.OfficialSpec`) and shown by the report
and the leaderboard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healthbench.data.subsets import PROFESSIONAL
from healthbench.errors import SettingsError
from healthbench.grading.scoring import PROFESSIONAL_LENGTH_ADJUSTMENT, LengthAdjustment

# HealthBench Professional's official grading: gpt-5.4 at low effort, through the Responses API.
PROFESSIONAL_GRADER: dict[str, Any] = {"model": "gpt-5.4-2026-03-05", "reasoning_effort": "low", "api": "responses"}
LENGTH_SETTING = "length adjustment"


@dataclass(frozen=True)
class Difference:
    """One setting of a run that is not the official configuration's."""

    setting: str
    value: str
    official: str

    def __str__(self) -> str:
        if not self.official:  # a sentence of a run recorded before differences were data
            return self.setting
        return f"{self.setting} {self.value} (official: {self.official})"

    def as_dict(self) -> dict[str, str]:
        """As run.json records it."""
        return {"setting": self.setting, "value": self.value, "official": self.official}

    @classmethod
    def read(cls, value: Any) -> Difference:
        """A difference as run.json records it; runs written before differences were data hold a sentence."""
        if isinstance(value, Mapping) and {"setting", "value", "official"} <= value.keys():
            return cls(str(value["setting"]), str(value["value"]), str(value["official"]))
        return cls(str(value), "", "")


def _described(adjustment: LengthAdjustment | None) -> str:
    return "none" if adjustment is None else adjustment.describe()


def differences(grader: Mapping[str, Any], adjustment: LengthAdjustment | None) -> list[Difference]:
    """How grader settings (`model`, `reasoning_effort`, `api`) and a length adjustment differ from
    Professional's official configuration."""
    found = [
        Difference(f"grader {name.replace('_', ' ')}", str(grader.get(name) or "none"), str(official))
        for name, official in PROFESSIONAL_GRADER.items()
        if grader.get(name) != official
    ]
    if adjustment != PROFESSIONAL_LENGTH_ADJUSTMENT:
        found.append(Difference(LENGTH_SETTING, _described(adjustment), _described(PROFESSIONAL_LENGTH_ADJUSTMENT)))
    return found


def rescored(found: Sequence[Difference], adjustment: LengthAdjustment | None) -> list[Difference]:
    """A Professional run's differences once it is rescored with `adjustment`: its grader's as they were, and the
    length adjustment's afresh."""
    kept = [d for d in found if d.setting != LENGTH_SETTING]
    if adjustment != PROFESSIONAL_LENGTH_ADJUSTMENT:
        kept.append(Difference(LENGTH_SETTING, _described(adjustment), _described(PROFESSIONAL_LENGTH_ADJUSTMENT)))
    return kept


def length_adjustment_for(
    subset: str | None, center: float | None, penalty_per_500_chars: float | None
) -> LengthAdjustment | None:
    """The settings given (both or neither); with neither, the subset's official adjustment (Professional's),
    and none for the other subsets, which have no confirmed one."""
    if (center is None) != (penalty_per_500_chars is None):
        raise SettingsError(
            "length adjustment: give both `length_adjustment_center` and `length_adjustment_penalty_per_500_chars`, "
            "or neither"
        )
    if center is not None and penalty_per_500_chars is not None:
        return LengthAdjustment(center, penalty_per_500_chars)
    return PROFESSIONAL_LENGTH_ADJUSTMENT if subset == PROFESSIONAL else None
