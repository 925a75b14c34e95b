"""A pool of judge servers for one grader model (several `--grader-base-url`): graded as one server grades, a reply's
items on one server, a server that dies taken out while the others go on, and a pool of dead servers stopped in
seconds. The servers are fake vLLM judges on loopback (a capacity that queues the rest, prefix-cache counters).

A state the test needs (a server full of requests it holds unanswered) is waited for, bounded, never timed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from healthbench.api.endpoint import MAX_IN_FLIGHT, base_urls
from healthbench.cli import main
from healthbench.grading.settings import GraderConfig, GradingOptions
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY, check_against_reference
from tests.test_unusable_endpoints import dead_url

_PATIENCE = 60.0  # seconds a test waits for a state the servers must reach
ITEMS = tuple(
    (points, f"Criterion {n}", ("axis:accuracy", "level:example")) for n, points in enumerate((5, -3, 4, 2, 6, -1))
)


def pool_rows(n: int) -> list[dict[str, Any]]:
    """`n` made-up rows of six rubric items each, every conversation its own."""
    return [make_row(f"t{i:03d}", prompt=(("user", f"Question {i}: I feel dizzy."),), rubrics=ITEMS) for i in range(n)]


def files(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[Path, Path, dict[str, str]]:
    replies = {row["prompt_id"]: f"Reply to {row['prompt_id']}: rest and drink water." for row in rows}
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    answers = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    return data, answers, replies


def grade_args(data: Path, answers: Path, out: Path, urls: list[str], *more: str) -> list[str]:
    pool = [flag for url in urls for flag in ("--grader-base-url", url)]
    return ["grade", "--data", str(data), "--responses", str(answers), "--out", str(out), *pool, *more]


ENV = {"HEALTHBENCH_GRADER_API_KEY": KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/never-used"}


def results(out: Path) -> list[str]:
    return [json.loads(line)["prompt_id"] for line in (out / "results.jsonl").read_text().splitlines()]


class Grading:
    """`healthbench grade` in a process of its own, its output read as it comes, so that a test can act on the
    servers mid-run; killed on exit if it is still running."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "healthbench", *args, "--no-progress"],
            env={**os.environ, **ENV},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout or ()), daemon=True)
        self._reader.start()
        self._deadline = time.monotonic() + _PATIENCE

    def until(self, reached: Callable[[], bool], what: str) -> None:
        """Wait, bounded, until `reached()` (or the run ends); `what` says what never came."""
        while not reached() and self.process.poll() is None:
            assert time.monotonic() < self._deadline, what
            time.sleep(0.05)  # polling for a state the servers reach, not timing anything

    def finish(self) -> tuple[int, str]:
        """The run's exit status and output, once it ends (bounded)."""
        self.process.wait(timeout=_PATIENCE * 2)
        self._reader.join(timeout=_PATIENCE)
        return self.process.returncode, "".join(self.lines)

    def __enter__(self) -> Grading:
        return self

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def test_a_pool_grades_as_one_server_with_each_replys_items_on_one_judge(tmp_path: Path) -> None:
    rows = pool_rows(60)
    data, answers, replies = files(tmp_path, rows)
    calls = len(rows) * len(ITEMS)
    with FakeOpenAI(max_running=4) as one, FakeOpenAI(max_running=4) as two, FakeOpenAI(max_running=4) as three:
        judges = [one, two, three]
        urls = [judge.base_url for judge in judges if judge.base_url]
        out = tmp_path / "out"
        result = CliRunner().invoke(main, grade_args(data, answers, out, urls, "--concurrency", "4"), env=ENV)
        assert result.exit_code == 0, result.output
        check_against_reference(out, rows, replies)
        assert sorted(results(out)) == sorted(replies)  # every sample once
        served = [judge.requests_total for judge in judges]
        assert sum(served) == calls and min(served) > 0  # every judge took part, and nothing was asked twice
        assert max(judge.capacity.peak_running for judge in judges) <= 4
        # A reply's items on one judge: its first misses the judge's prefix cache, the others hit. A reply spread
        # over the judges at random would miss about once per judge it reached (two or three times).
        misses = sum(judge.prefix_cache.queries - judge.prefix_cache.hits for judge in judges)
        assert len(rows) <= misses <= 1.5 * len(rows)
    record = json.loads((out / "run.json").read_text())
    assert record["spec"]["grader"]["base_url"] == ",".join(urls)


def test_a_server_that_dies_mid_run_is_taken_out_and_its_requests_go_to_the_others(tmp_path: Path) -> None:
    """The first judge takes its share and never answers (held), then dies with all of it in flight: every one of
    those is graded by the other, once, and the run ends as one server's would."""
    rows = pool_rows(40)
    data, answers, replies = files(tmp_path, rows)
    calls = len(rows) * len(ITEMS)
    out = tmp_path / "out"
    dying, living = FakeOpenAI(max_running=3), FakeOpenAI(max_running=3)
    try:
        dying.start()
        living.start()
        dying.pause()
        assert dying.base_url and living.base_url
        dead = dying.base_url
        with Grading(*grade_args(data, answers, out, [dead, living.base_url]), "--concurrency", "3") as grading:
            grading.until(lambda: dying.capacity.running == 3, "the first judge never filled up")
            dying.stop()  # every request it holds is cut off unanswered
            status, output = grading.finish()
    finally:
        dying.stop()
        living.stop()
    assert status == 0, output
    check_against_reference(out, rows, replies)
    assert sorted(results(out)) == sorted(replies)
    assert living.requests_total == calls  # the dead judge answered nothing: the living one graded every item once
    assert f"judge server {dead} is out of the pool" in output
    assert KEY not in output


def test_a_dead_server_in_the_pool_from_the_start_costs_nothing_but_a_line(tmp_path: Path) -> None:
    rows = pool_rows(10)
    data, answers, replies = files(tmp_path, rows)
    dead = dead_url()
    with FakeOpenAI() as living:
        assert living.base_url
        out = tmp_path / "out"
        result = CliRunner().invoke(main, grade_args(data, answers, out, [dead, living.base_url]), env=ENV)
        assert result.exit_code == 0, result.output
        check_against_reference(out, rows, replies)
        assert living.requests_total == len(rows) * len(ITEMS)
    assert f"judge server {dead} is out of the pool (connection refused" in result.output


def test_a_pool_of_dead_servers_stops_in_seconds_naming_each(tmp_path: Path) -> None:
    rows = pool_rows(3)
    data, answers, _ = files(tmp_path, rows)
    first, second = dead_url(), dead_url()
    result = CliRunner().invoke(main, grade_args(data, answers, tmp_path / "out", [first, second]), env=ENV)
    assert result.exit_code != 0
    message = " ".join(result.output.split())
    assert "every server of the pool is out" in message and first in message and second in message
    assert "Traceback" not in result.output


def test_a_resume_on_another_pool_of_the_same_model_goes_on_and_says_so(tmp_path: Path) -> None:
    rows = pool_rows(6)
    data, answers, replies = files(tmp_path, rows)
    out = tmp_path / "out"
    with FakeOpenAI() as one, FakeOpenAI() as two:
        assert one.base_url and two.base_url
        before, after = one.base_url, f"{one.base_url},{two.base_url}"
        first = CliRunner().invoke(main, grade_args(data, answers, out, [one.base_url]), env=ENV)
        assert first.exit_code == 0, first.output
        (out / "metrics.json").unlink()  # as if the first session had been stopped before its end
        again = CliRunner().invoke(main, grade_args(data, answers, out, [one.base_url, two.base_url]), env=ENV)
        assert again.exit_code == 0, again.output
        assert two.requests_total == 0  # every verdict was in the store already
    message = " ".join(again.output.split())
    assert f"now at {after}, not {before} as in the last session" in message
    check_against_reference(out, rows, replies)


def test_a_pool_is_named_once_per_server_and_comma_separated_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    assert base_urls(" http://a:1/v1/ , http://b:2/v1") == ("http://a:1/v1", "http://b:2/v1")
    monkeypatch.setenv("HEALTHBENCH_GRADER_BASE_URL", "http://a:1/v1,http://b:2/v1/")
    assert GraderConfig.from_env().base_urls == ("http://a:1/v1", "http://b:2/v1")
    assert GradingOptions(grader_base_url="http://a:1/v1,http://b:2/v1").grader(None).base_urls == (
        "http://a:1/v1",
        "http://b:2/v1",
    )
    with pytest.raises(ValueError, match="names a server twice"):
        GraderConfig(base_url="http://a:1/v1,http://a:1/v1/")
    with pytest.raises(ValueError, match="empty server between its commas"):
        GraderConfig(base_url="http://a:1/v1,,http://b:2/v1")


def test_budgets_past_1024_are_for_servers_of_your_own() -> None:
    assert (
        GraderConfig(base_url="http://127.0.0.1:1/v1,http://127.0.0.1:2/v1", concurrency=1500).client().ceiling == 3000
    )
    with pytest.raises(ValueError, match=f"at most {MAX_IN_FLIGHT:,} there"):
        GraderConfig(concurrency=1500)
    result = CliRunner().invoke(main, ["grade", "--help"])
    assert "4,096 at a server of your own" in " ".join(result.output.split())


def test_serve_grades_on_a_pool_named_by_its_variable(tmp_path: Path) -> None:
    """`HEALTHBENCH_GRADER_BASE_URL` comma-separated, as serve, TRL and verl read it: one budget at each server, and
    the rewards `grade`'s."""
    pytest.importorskip("openreward")
    from tests.serving import graded_by_cli, served_with_log
    from tests.test_serve_rewards import post

    rows = pool_rows(8)
    data, _, replies = files(tmp_path, rows)
    with FakeOpenAI() as one, FakeOpenAI() as two:
        assert one.base_url and two.base_url
        pool = f"{one.base_url},{two.base_url}"
        env = {"HEALTHBENCH_GRADER_API_KEY": KEY}
        with served_with_log(data, pool, env=env) as (url, _lines):
            items = [{"prompt_id": pid, "reply": reply} for pid, reply in replies.items()]
            status, answer = asyncio.run(post(url, "/rewards", {"split": "test", "items": items}))
        assert status == 200, answer
        assert one.requests_total > 0 and two.requests_total > 0
        assert one.requests_total + two.requests_total == len(rows) * len(ITEMS)
        graded = graded_by_cli(tmp_path, data, replies, one.base_url)
    for result in answer["results"]:
        assert result["reward"] == pytest.approx(graded[result["prompt_id"]]["score"], abs=1e-9)


def test_a_server_that_comes_back_is_tried_and_taken_back_in(tmp_path: Path) -> None:
    """The first server is down as the run starts and comes up while the other holds every request it took: its
    trial is answered, a line says it is back, and the run ends as one server's would."""
    rows = pool_rows(20)
    data, answers, replies = files(tmp_path, rows)
    out = tmp_path / "out"
    down = dead_url()
    port = int(down.rsplit(":", 1)[1].split("/")[0])
    living, revived = FakeOpenAI(), FakeOpenAI(port=port)
    try:
        living.start()
        living.pause()  # it holds what it takes: the run cannot end before the first server is back
        assert living.base_url
        with Grading(*grade_args(data, answers, out, [down, living.base_url]), "--concurrency", "4") as grading:
            taken_out = "the first server was never taken out"
            grading.until(lambda: any("is out of the pool" in line for line in grading.lines), taken_out)
            revived.start()
            grading.until(lambda: revived.requests_total > 0, "the first server was never tried again")
            living.resume()
            status, output = grading.finish()
    finally:
        living.stop()
        revived.stop()
    assert status == 0, output
    assert f"judge server {down} is back in the pool" in output
    check_against_reference(out, rows, replies)
    assert revived.requests_total + living.requests_total == len(rows) * len(ITEMS)  # none asked twice


def test_a_server_whose_answers_cannot_be_used_is_taken_out_while_the_others_grade(tmp_path: Path) -> None:
    """One server of two without the JSON its siblings give (a wrong chat template, say): too few of the pool's
    answers for the pool to be unusable, so the server alone goes out, and the run ends as one server's would."""
    rows = pool_rows(30)
    data, answers, replies = files(tmp_path, rows)
    with FakeOpenAI(fault_rate=1.0, faults=["prose"]) as prose, FakeOpenAI() as good:
        assert prose.base_url and good.base_url
        bad, out = prose.base_url, tmp_path / "out"
        result = CliRunner().invoke(main, grade_args(data, answers, out, [bad, good.base_url]), env=ENV)
    assert result.exit_code == 0, result.output
    message = " ".join(result.output.split())
    assert f"judge server {bad} is out of the pool (12 of its first 12 answers could not be used" in message
    check_against_reference(out, rows, replies)


def test_a_password_in_a_pools_url_is_never_shown(tmp_path: Path) -> None:
    rows = pool_rows(2)
    data, answers, _ = files(tmp_path, rows)
    first, second = dead_url(), dead_url()
    secret = "hunter2-secret"
    pool = [first.replace("http://", f"http://user:{secret}@"), second.replace("http://", f"http://user:{secret}@")]
    # The URL's password authorises its requests (HTTP Basic, as a router may want): no key beside it.
    keyless = {**ENV, "HEALTHBENCH_GRADER_API_KEY": "", "OPENAI_API_KEY": ""}
    result = CliRunner().invoke(main, grade_args(data, answers, tmp_path / "out", pool), env=keyless)
    assert result.exit_code != 0 and "every server of the pool is out" in result.output
    assert secret not in result.output and first in " ".join(result.output.split())
    # With a key too, the two ways to authorise are refused in one line before anything is sent.
    both = CliRunner().invoke(main, grade_args(data, answers, tmp_path / "other", pool), env=ENV)
    assert both.exit_code != 0 and "a user and password in its URL, and a key" in " ".join(both.output.split())
    assert secret not in both.output and "Traceback" not in both.output
