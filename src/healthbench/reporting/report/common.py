"""What every report page shares: how run settings and labels are shown."""

from __future__ import annotations

import json
from typing import Any

from healthbench.runs.records import RunRecord


def _flat(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict) and value:
        return [line for key, inner in value.items() for line in _flat(inner, f"{prefix}{key}" + ".")]
    name = prefix.removesuffix(".")
    return [(name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))]


def settings(run: RunRecord | None) -> list[tuple[str, str]]:
    """Every setting and count of run.json, a line each ("grader.request.api", "chat")."""
    if run is None:
        return []
    return [
        ("schema version", str(run.version)),
        *_flat(run.spec.model_dump(mode="json")),
        *_flat(run.stats.model_dump(mode="json")),
    ]


def label(name: str) -> str:
    """A metric or tag name as a reader sees it: `theme:global_health` is "global health"."""
    return name.split(":", 1)[-1].replace("_", " ")
