"""The tag families a run's metrics are sliced by: one list, read by the data loader, the report, `compare`,
the leaderboard and the Inspect metrics.

HealthBench tags each row with one `theme:*` (and the consensus criteria its physicians agreed on) and each rubric
item with an `axis:*`, a `level:*` and, for consensus items, a `cluster:*`. HealthBench Professional's rubric
items carry no tags; its rows' slice fields become example tags of the same form (`use_case:consult`).
"""

from __future__ import annotations

THEMES = (
    "emergency_referrals",
    "communication",
    "hedging",
    "complex_responses",
    "health_data_tasks",
    "global_health",
    "context_seeking",
)
# HealthBench Professional's slice fields, in the order they are shown.
PROFESSIONAL_SLICES = ("use_case", "type", "difficulty", "specialty")
# Example-tag families a run is sliced by, in the order they are shown; any other follows, by name.
EXAMPLE_FAMILIES = ("theme", *PROFESSIONAL_SLICES)
# The consensus criteria a task's physicians agreed apply: their figures are the rubric clusters', so these
# tags are neither charted nor compared.
UNSLICED_FAMILIES = frozenset({"physician_agreed_category"})
# Rubric-tag families, in the order they are shown; `axis` is the one every item carries.
RUBRIC_FAMILIES = ("axis", "level", "cluster")
# How an item's axis is tagged, and so how a task's per-axis scores are named (`axis:accuracy`).
AXIS_PREFIX = "axis:"
# What a leaderboard and the Inspect metrics break a headline down by.
HEALTHBENCH_BREAKDOWN = ("theme", "axis")
BREAKDOWN_FAMILIES = (*HEALTHBENCH_BREAKDOWN, *PROFESSIONAL_SLICES)


def family(name: str) -> str:
    """The family of a tag or metric name: `theme` for `theme:hedging`."""
    return name.split(":", 1)[0]


def breakdown(professional: bool) -> tuple[str, ...]:
    """The families a run's headline is broken down by: Professional's slices, or themes and axes."""
    return PROFESSIONAL_SLICES if professional else HEALTHBENCH_BREAKDOWN
