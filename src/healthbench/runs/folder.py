"""Running samples through the policy and the grader, and writing the results as they finish.

Every command that grades (`grade`, `eval`, `baseline`) is a list of jobs run here. Replies and verdicts
are kept in the run's store as they arrive, and `results.jsonl` gets one line per sample the moment it is
graded, so a crash loses at most what was in flight. Metrics are aggregated in a fixed order (repeat,
prompt_id), so the seeded bootstrap depends neither on which task finished first nor on a resume. If any
sample cannot be graded, no `metrics.json` is written: a partial score would be a wrong score.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"
METRICS = "metrics.json"
RUN = "run.json"
USAGE = "usage.json"


def write_json_atomic(path: Path, value: Any) -> None:
    """Write JSON to a temporary file and rename it over `path`, so readers never see half a file."""
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(value, out, indent=2)
        out.write("\n")
    os.chmod(temp, 0o644)  # mkstemp makes it private; results are meant to be read and shared
    os.replace(temp, path)
