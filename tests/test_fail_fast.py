"""What waiting cannot cure stops a command at once, with one line, for the model and the grader alike, and keeps
what was answered; Ctrl-C lets what is on the wire land, says what is saved, and the same command finishes."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.api.retrying import FIRST_FAILURES
from healthbench.cli import main
from healthbench.data.loading import load_rows
from healthbench.errors import EndpointUnusable
from healthbench.grading.settings import GraderConfig
from healthbench.integrations.openreward.deployment import Deployment
from healthbench.integrations.openreward.environment import HealthBench
from healthbench.runs.folder import STORE, RunFolder
from healthbench.runs.records import UsageRecord
from healthbench.testing import Canned, FakeOpenAI
from tests.conftest import numbered_rows, write_jsonl
from tests.interrupting import cli_process, set_after
from tests.reference import KEY
from tests.test_eval import eval_args
from tests.test_metaeval import made_up_meta_rows
from tests.test_unusable_endpoints import dead_url

ENV = {"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY}


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(main, args, env=ENV)


def one_line(result: Result) -> str:
    """The command's whole output, which must be one line and no traceback."""
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert KEY not in result.output
    return lines[0]


def stored_replies(out: Path) -> int:
    with sqlite3.connect(out / STORE) as db:
        count: int = db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    return count


def test_a_dead_model_endpoint_stops_eval_at_once(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(30))
    url = dead_url()
    result = invoke(eval_args(data, tmp_path / "out", url, grader_url=fake.base_url or ""))
    assert result.exit_code == 1
    line = one_line(result)
    assert f"stopped, the model's endpoint {url} cannot be reached (connection refused" in line
    assert "the same command goes on from there once the endpoint answers" in line
    assert fake.requests_total == 0 and not (tmp_path / "out" / "metrics.json").exists()


@pytest.mark.parametrize("url", ["notaurl", "localhost:8000/v1"])
def test_a_model_url_that_is_not_one_stops_eval_at_once(tmp_path: Path, fake: FakeOpenAI, url: str) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(5))
    result = invoke(eval_args(data, tmp_path / "out", url, grader_url=fake.base_url or ""))
    assert result.exit_code == 1
    assert f"the model's endpoint {url} is not a URL" in one_line(result)


def test_a_dead_grader_stops_grade_with_one_line_not_one_per_task(tmp_path: Path) -> None:
    data, replies = rows_and_replies(tmp_path, 20)
    url = dead_url()
    args = ["grade", "--data", str(data), "--responses", str(replies), "--out", str(tmp_path / "out")]
    result = invoke([*args, "--grader-base-url", url, "--no-progress"])
    assert result.exit_code == 1
    assert f"stopped, the grader's endpoint {url} cannot be reached" in one_line(result)


def test_a_grader_400_that_cannot_succeed_stops_at_once(tmp_path: Path, fake: FakeOpenAI) -> None:
    data, replies = rows_and_replies(tmp_path, 20)
    args = ["grade", "--data", str(data), "--responses", str(replies), "--out", str(tmp_path / "out")]
    fake.reset()
    result = invoke([*args, "--grader-base-url", fake.base_url or "", "--no-progress", "--grader-model", "o3"])
    assert result.exit_code == 0, result.output  # o3 asked as a reasoning model: fine
    fake.reset()
    refused = invoke([*args[:-1], str(tmp_path / "other"), "--grader-base-url", fake.base_url or "", "--no-progress",
                      "--grader-model", "o3", "--no-grader-reasoning"])  # fmt: skip
    assert refused.exit_code == 1
    line = one_line(refused)
    assert "the grader's endpoint" in line and "refused a request (HTTP 400 unsupported_value" in line
    assert "no score is written" in line and "run the same command again" not in line
    assert fake.responses_by_kind["bad_request"] <= 64  # what was in flight when the first came back


PAGE = "<html><body><h1>502 Bad Gateway</h1></body></html>"


def rows_and_replies(tmp: Path, n: int) -> tuple[Path, Path]:
    """`n` numbered rows and a reply to each, written to rows.jsonl and replies.jsonl in `tmp`."""
    task_rows = numbered_rows(n)
    data = write_jsonl(tmp / "rows.jsonl", task_rows)
    replies = write_jsonl(
        tmp / "replies.jsonl", [{"prompt_id": r["prompt_id"], "response": "Rest."} for r in task_rows]
    )
    return data, replies


def grade_args(tmp: Path, n: int, grader: str, *extra: str) -> list[str]:
    data, replies = rows_and_replies(tmp, n)
    return [
        "grade", "--data", str(data), "--responses", str(replies), "--out", str(tmp / "out"), "--grader-base-url",
        grader, "--no-progress", *extra,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("canned", "said"),
    [
        (Canned(200, PAGE, "text/html"), f"HTTP 200, not JSON: {PAGE}"),
        (Canned(200, "{}"), "HTTP 200, no choices[0].message: {}"),
        (Canned(500, '{"error": {"message": "upstream down"}}'), 'HTTP 500: {"error": {"message": "upstream down"}}'),
    ],
)
def test_a_grader_that_answers_what_cannot_be_used_stops_grade_with_one_line(
    tmp_path: Path, canned: Canned, said: str
) -> None:
    with FakeOpenAI(canned=canned) as server:
        url = server.base_url or ""
        result = invoke(grade_args(tmp_path, 200, url, "--concurrency", "8"))
        # Not 12 attempts for each of the 400 calls: a few, and what was in flight when the verdict came.
        assert server.requests_total <= FIRST_FAILURES + 8
    assert result.exit_code == 1
    line = one_line(result)
    assert f"stopped, the grader's endpoint {url} gave no usable answer to its first " in line
    assert f"(the last: {said})" in line and "the same command goes on from there once the endpoint answers" in line


def test_a_grader_that_never_answers_stops_grade_with_the_timeout_named(tmp_path: Path) -> None:
    with FakeOpenAI(canned=Canned(status=None)) as server:
        url = server.base_url or ""
        result = invoke(grade_args(tmp_path, 20, url, "--grader-timeout", "0.5", "--concurrency", "8"))
        assert server.requests_total <= FIRST_FAILURES + 8
    assert result.exit_code == 1
    line = one_line(result)
    assert f"stopped, the grader's endpoint {url} gave no usable answer to its first " in line
    assert "(the last: no answer within 0.5 s)" in line


def test_a_model_that_never_answers_stops_eval_with_the_timeout_named(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(20))
    with FakeOpenAI(canned=Canned(status=None)) as server:
        url = server.base_url or ""
        result = invoke(eval_args(data, tmp_path / "out", url, "--timeout", "0.5", grader_url=fake.base_url or ""))
    assert result.exit_code == 1
    line = one_line(result)
    assert f"stopped, the model's endpoint {url} gave no usable answer to its first " in line
    assert "(the last: no answer within 0.5 s)" in line
    assert fake.requests_total == 0  # nothing to grade


def test_a_dead_grader_keeps_the_models_replies_for_the_next_session(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(40))
    out = tmp_path / "out"
    fake.reset()
    stopped = invoke(eval_args(data, out, fake.base_url or "", "--policy-concurrency", "4", grader_url=dead_url()))
    assert stopped.exit_code == 1
    assert "the grader's endpoint" in one_line(stopped)
    kept = stored_replies(out)
    assert kept > 0  # the replies that arrived before the stop
    fake.reset()
    resumed = invoke(eval_args(data, out, fake.base_url or "", grader_url=fake.base_url or ""))
    assert resumed.exit_code == 0, resumed.output
    assert sum(1 for body in fake.bodies if body.get("model") == "fake-model") == 40 - kept


def test_a_dead_grader_stops_meta_eval(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(30))
    url = dead_url()
    result = invoke(["meta-eval", "--data", str(data), "--out", str(tmp_path / "out"), "--grader-base-url", url])
    assert result.exit_code == 1
    assert f"stopped, the grader's endpoint {url} cannot be reached" in one_line(result)


def test_batches_of_a_run_whose_endpoint_is_gone_say_so_in_one_line(tmp_path: Path) -> None:
    data, replies = rows_and_replies(tmp_path, 3)
    out = tmp_path / "out"
    with FakeOpenAI(batch_delay=3600) as server:
        args = ["grade", "--data", str(data), "--responses", str(replies), "--out", str(out), "--no-progress"]
        left = invoke([*args, "--grader-base-url", server.base_url or "", "--batch", "--no-wait"])
        assert left.exit_code == 0, left.output
    url = dead_url()
    result = invoke(["batches", str(out), "--grader-base-url", url])
    assert result.exit_code == 1
    assert f"endpoint {url} cannot be reached" in one_line(result)


def test_a_served_tool_call_with_a_dead_grader_fails_with_the_endpoint_named(tmp_path: Path) -> None:
    served = load_rows(write_jsonl(tmp_path / "rows.jsonl", numbered_rows(1)))
    url = dead_url()
    config = GraderConfig(base_url=url)  # the whole retry table, as served
    env = HealthBench.bound(Deployment({"test": served}, config))({"split": "test", "prompt_id": "t000"}, {})
    with pytest.raises(EndpointUnusable, match=f"endpoint {url} cannot be reached") as caught:
        asyncio.run(env.call_terminal_tool("Rest."))
    assert KEY not in str(caught.value)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_lands_what_is_out_says_what_is_saved_and_the_same_command_finishes(
    tmp_path: Path, stop: signal.Signals
) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(40))
    halfway, count = set_after(50)
    with FakeOpenAI(respond=count, latency=0.1) as server:
        url = server.base_url or ""
        args = eval_args(data, tmp_path / "out", url, "--concurrency", "8", "--policy-concurrency", "8", grader_url=url)
        process = cli_process(args, ENV)
        assert halfway.wait(timeout=120)
        process.send_signal(stop)
        stdout, stderr = process.communicate(timeout=120)
        interrupted = server.requests_total
        assert process.returncode == (130 if stop == signal.SIGINT else 143), stderr
        saved = sum(1 for _ in (tmp_path / "out" / "results.jsonl").open())
        assert stdout == "" and "Traceback" not in stderr
        how = "interrupted" if stop == signal.SIGINT else "stopped by SIGTERM"
        assert stderr.strip().splitlines() == [
            f"healthbench: {how}: {saved} of 40 graded and saved, and every answer that arrived is kept in "
            f"{tmp_path / 'out' / STORE}; run the same command again to go on from there"
        ]
        assert 0 < saved < 40 and interrupted < 120
        server.reset()
        resumed = invoke(args)
        assert resumed.exit_code == 0, resumed.output
        # What was on the wire at Ctrl-C landed and was stored: nothing is asked twice.
        assert interrupted + server.requests_total == 120  # 40 replies and 80 verdicts
        server.reset()
        clean = invoke(eval_args(data, tmp_path / "clean", url, grader_url=url))
        assert clean.exit_code == 0, clean.output
    assert (tmp_path / "out" / "metrics.json").read_bytes() == (tmp_path / "clean" / "metrics.json").read_bytes()
    # Each line's usage is its sample's own, whichever session paid: one reply and two verdicts, the lines of the
    # samples graded before the stop included, and the lines add up to usage.json's whole run.
    folder = RunFolder(tmp_path / "out")
    results, usage = folder.read_results(), folder.read(UsageRecord)
    assert usage is not None and usage.whole_run.policy is not None and usage.whole_run.grader is not None
    assert all(r.policy_usage is not None and r.policy_usage.calls == 1 for r in results)
    assert all(r.usage is not None and r.usage.calls == 2 for r in results)
    for side, lines in (
        (usage.whole_run.policy, [r.policy_usage for r in results]),
        (usage.whole_run.grader, [r.usage for r in results]),
    ):
        for field in ("calls", "prompt_tokens", "completion_tokens"):
            assert sum(getattr(line, field) for line in lines if line is not None) == getattr(side, field), field


def test_ctrl_c_outside_a_run_is_one_line_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # as a second Ctrl-C, or one before the run's loop starts, arrives

    monkeypatch.setattr("healthbench.cli.execute.run_session", interrupted)
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(2))
    result = invoke(eval_args(data, tmp_path / "out", dead_url(), grader_url=dead_url()))
    assert result.exit_code == 130
    assert one_line(result) == "healthbench: interrupted; a run keeps every answer that arrived in its store"
