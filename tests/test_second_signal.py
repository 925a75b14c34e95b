"""A second Ctrl-C or SIGTERM while a stopped run waits for what is on the wire ends it at once, in one line and
without a traceback, and what had landed stays landed: the same command then asks only for the rest, and its
metrics are a clean run's."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from healthbench.runs.folder import RESULTS, STORE
from healthbench.testing import FakeOpenAI
from tests.conftest import numbered_rows, write_jsonl
from tests.interrupting import cli_process
from tests.test_eval import eval_args, run_eval
from tests.test_fail_fast import ENV

# The wind-down would wait an hour for the held calls: a run that ends while they are held was ended by the second
# signal.
LANDING_AN_HOUR = "import healthbench.runs.session as session; session._LANDING = 3600.0; "
ANSWERED = 50


def stored(out: Path) -> int:
    """Replies and verdicts in the run's store."""
    with sqlite3.connect(out / STORE) as db:
        return sum(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in ("samples", "verdicts"))


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_second_signal_ends_the_wind_down_at_once_in_one_line(tmp_path: Path, stop: signal.Signals) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(40))
    held, release = threading.Event(), threading.Event()
    answered = 0

    def hold_after_some(body: dict[str, Any]) -> None:
        # From the 51st call on the endpoint answers nothing until the test lets it: calls stay on the wire.
        nonlocal answered
        if answered == ANSWERED:
            held.set()
            release.wait(timeout=300)
        answered += 1

    out = tmp_path / "out"
    with FakeOpenAI(respond=hold_after_some) as server:
        url = server.base_url or ""
        args = eval_args(data, out, url, "--concurrency", "8", "--policy-concurrency", "8")
        process = cli_process(args, ENV, setup=LANDING_AN_HOUR)
        said: list[str] = []
        assert process.stderr is not None
        reader = threading.Thread(target=lambda: said.extend(process.stderr or ()), daemon=True)
        reader.start()
        try:
            assert held.wait(timeout=120)
            process.send_signal(stop)
            # Sent again until the run says it stopped: two of the same signal sent back to back may reach it as one.
            deadline = time.monotonic() + 120
            while not said and process.poll() is None and time.monotonic() < deadline:
                process.send_signal(stop)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)  # it stops in about a second: sent again only if it did not hear
            process.wait(timeout=60)
            assert not release.is_set()  # ended while its calls were still held
            reader.join(timeout=60)
            stdout, stderr = (process.stdout.read() if process.stdout else ""), "".join(said)
        finally:
            release.set()
            if process.poll() is None:
                process.kill()
        assert process.returncode == (130 if stop == signal.SIGINT else 143), stderr
        saved = sum(1 for _ in (out / RESULTS).open())
        how = "interrupted" if stop == signal.SIGINT else "stopped by SIGTERM"
        assert stdout == "" and "Traceback" not in stderr and "never retrieved" not in stderr
        assert stderr.strip().splitlines() == [
            f"healthbench: {how}: {saved} of 40 graded and saved, and every answer that arrived is kept in "
            f"{out / STORE}; run the same command again to go on from there"
        ]
    landed = stored(out)
    assert 0 < landed <= ANSWERED
    # A fresh endpoint: the held one still has the stopped run's last requests to read.
    with FakeOpenAI() as server:
        url = server.base_url or ""
        resumed = run_eval(data, out, url)
        assert resumed.exit_code == 0, resumed.output
        assert server.requests_total == 120 - landed  # every answer that landed was kept: none is asked again
        server.reset()
        assert run_eval(data, tmp_path / "clean", url).exit_code == 0
    assert (out / "metrics.json").read_bytes() == (tmp_path / "clean" / "metrics.json").read_bytes()
