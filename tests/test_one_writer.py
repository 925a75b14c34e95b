"""One writer per run folder: a run holds an OS lock on its folder for its whole life, a second command on the same
folder stops at once naming the folder and the process holding it (before any call), and the commands that read
runs take a held folder for the unfinished run it is."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.runs.folder import RunFolder
from healthbench.runs.lock import writer, writing
from healthbench.runs.records import UsageRecord
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY

ENV = {"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY}


def eval_args(data: Path, out: Path, url: str) -> list[str]:
    return [
        "eval", "--model", "fake-model", "--base-url", url, "--grader-base-url", url, "--data", str(data),
        "--out", str(out), "--no-progress",
    ]  # fmt: skip


def run_cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=ENV)


def test_a_second_run_on_a_folder_a_live_run_writes_stops_before_any_call(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row(f"t{i}") for i in range(4)])
    out = tmp_path / "out"
    first_call, release = threading.Event(), threading.Event()

    def hold_the_first(body: dict[str, Any]) -> None:
        # The first run's first call waits here: that run is live, holding its folder, while the second starts.
        if not first_call.is_set():
            first_call.set()
            release.wait(timeout=60)

    with FakeOpenAI(respond=hold_the_first) as server:
        assert server.base_url
        command = [sys.executable, "-m", "healthbench", *eval_args(data, out, server.base_url)]
        first = subprocess.Popen(command, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert first_call.wait(timeout=60)
            seen = server.requests_total
            second = run_cli(*eval_args(data, out, server.base_url))
            assert server.requests_total == seen  # the second run asked nothing
            assert writer(out) == first.pid
            readers = (
                ("report", str(out)),
                ("compare", str(out), str(out)),
                ("leaderboard", str(out), "--out", str(tmp_path / "board.html")),
            )
            for reader in readers:
                read = run_cli(*reader)
                assert read.exit_code == 1
                assert read.output.strip().splitlines()[-1] == (
                    f"Error: {out}: an unfinished run, being written now by process {first.pid}; read it once that "
                    "run has ended"
                )
        finally:
            release.set()
            _, first_err = first.communicate(timeout=120)
        assert first.returncode == 0, first_err
        total = server.requests_total
    assert second.exit_code == 1
    assert second.output.strip().splitlines() == [
        f"Error: {out} is being written by process {first.pid}, a run still going: wait for it to end (or stop it), "
        "or use another --out folder"
    ]
    assert writer(out) is None  # the lock went with the process
    # Four replies and eight verdicts: one run's calls, all of them recorded once.
    assert total == 12
    folder = RunFolder(out)
    assert len(folder.read_results()) == 4
    usage = folder.read(UsageRecord)
    assert usage is not None and usage.whole_run.grader is not None and usage.whole_run.policy is not None
    assert (usage.whole_run.grader.calls, usage.whole_run.policy.calls) == (8, 4)
    assert sum(record.usage.calls for record in folder.read_results() if record.usage is not None) == 8
    assert run_cli("report", str(out)).exit_code == 0


def test_a_killed_writer_leaves_no_lock(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = "import sys, os; from healthbench.runs.lock import writing; from pathlib import Path\n"
    code += "with writing(Path(sys.argv[1])):\n    os.kill(os.getpid(), 9)\n"
    killed = subprocess.run([sys.executable, "-c", code, str(out)], timeout=60)
    assert killed.returncode == -9
    assert (out / "writer.lock").exists() and writer(out) is None
    with writing(out):  # taken at once: nothing stale to clean up
        assert writer(out) == os.getpid()
