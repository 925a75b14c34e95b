"""A machine up for days: the monotonic clock (seconds since boot) is large, and nothing may assume it small."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from healthbench.testing import FakeOpenAI
from tests.conftest import write_jsonl
from tests.reference import KEY, check_against_reference, made_up_rows

# Loaded by the interpreter at start-up (from PYTHONPATH): the process's monotonic clock reads as on a machine booted
# eleven days ago, for asyncio and the pace alike.
UP_FOR_DAYS = """\
import time
_monotonic = time.monotonic
time.monotonic = lambda: _monotonic() + 11 * 86_400.0
"""


def test_grade_on_a_machine_up_for_days_grades_as_on_one_just_booted(tmp_path: Path, fake: FakeOpenAI) -> None:
    # Past ten hours of uptime the pace's growth from a never-cut factor overflowed a float, and every grader start
    # raised OverflowError: CI's first run on a long-lived machine failed on it.
    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(UP_FOR_DAYS)
    rows = made_up_rows()
    replies = {row["prompt_id"]: f"Reply to {row['prompt_id']}: stay hydrated." for row in rows}
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    responses = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    assert fake.base_url
    path = os.pathsep.join(filter(None, [str(boot), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "HEALTHBENCH_GRADER_API_KEY": KEY}
    clock = subprocess.run(
        [sys.executable, "-c", "import time; print(time.monotonic())"], env=env, capture_output=True, text=True
    )
    assert float(clock.stdout) > 11 * 86_400  # the machine reads as up for days
    done = subprocess.run(
        [
            *(sys.executable, "-m", "healthbench", "grade", "--data", str(data), "--responses", str(responses)),
            *("--out", str(tmp_path / "out"), "--grader-base-url", fake.base_url, "--no-progress"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    check_against_reference(tmp_path / "out", rows, replies)
