"""What every report page shares: how run settings and labels are shown."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def settings(run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every run setting that reads as one line; usage is shown as its own table."""
    shown = []
    for key, value in run.items():
        if key in ("usage", "policy_usage"):
            continue
        shown.append((str(key), value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)))
    return shown


def label(name: str) -> str:
    """A metric or tag name as a reader sees it: `theme:global_health` is "global health"."""
    return name.split(":", 1)[-1].replace("_", " ")
