"""What every report page shares: reading a run's JSON files, writing the page atomically, and showing
run settings and labels."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPORT = "report.html"


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or an empty one when the file is absent (an incomplete run)."""
    if not path.exists():
        return {}
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return value


def write_html(out_dir: Path, html: str) -> Path:
    """Write `out_dir/report.html` through a temporary file, so a reader never sees half of it."""
    path = out_dir / REPORT
    # Not tempfile.mkstemp: its 0600 mode would carry over, and a report is meant to be shared.
    temp = out_dir / f".{REPORT}.{os.getpid()}.tmp"
    try:
        temp.write_text(html, encoding="utf-8", newline="")
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return path


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
