"""A run whose disk fills up mid-run stops in one line naming the folder and the space left, keeps everything
answered, and the same command finishes once there is space, with the metrics of a run never interrupted.

The disk is a 4 MiB tmpfs the test mounts (as root; skipped where mounting is not permitted), filled but for 256 KiB
by a file that is removed to give the space back."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healthbench.runs.folder import RESULTS, STORE
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.test_eval import run_eval


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of the test's own."""
    disk = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)  # lazy: a file still open cannot keep it


def rows(n: int) -> list[dict[str, Any]]:
    long = "I have felt dizzy for three days, mostly in the morning, and I am not sure what to do about it. " * 3
    return [make_row(f"t{i:03d}", prompt=(("user", f"Question {i}: {long}"),)) for i in range(n)]


def stored(out: Path) -> int:
    with contextlib.closing(sqlite3.connect(out / STORE)) as db:
        return sum(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in ("samples", "verdicts"))


def test_a_full_disk_stops_the_run_in_one_line_and_the_same_command_finishes(
    tmp_path: Path, small_disk: Path, fake: FakeOpenAI
) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows(120))
    out = small_disk / "out"
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (4096 - 256) * 1024)  # 256 KiB left; removed, it is the space given back
    full = run_eval(data, out, fake.base_url or "")
    assert full.exit_code == 1
    assert "Traceback" not in full.output
    said = full.output.strip().splitlines()
    assert len(said) == 1, full.output
    assert re.fullmatch(
        rf"Error: cannot write {re.escape(str(out))}: its disk is full \([0-9.]+ (bytes|KiB) free\); everything "
        rf"answered so far is kept in {re.escape(str(out / STORE))}: free some space, then run the same command "
        "again to go on from there",
        said[0],
    ), said[0]
    assert not (out / "metrics.json").exists()
    asked = fake.requests_total
    kept = stored(out)
    assert kept > 0 and asked < 360  # stopped mid-run: 120 replies and 240 verdicts in all
    filler.unlink()
    fake.reset()
    resumed = run_eval(data, out, fake.base_url or "")
    assert resumed.exit_code == 0, resumed.output
    assert fake.requests_total == 360 - kept  # every answer kept: none is asked again
    fake.reset()
    clean = run_eval(data, tmp_path / "clean", fake.base_url or "")
    assert clean.exit_code == 0, clean.output
    assert (out / "metrics.json").read_bytes() == (tmp_path / "clean" / "metrics.json").read_bytes()
    assert len((out / RESULTS).read_text().splitlines()) == 120
