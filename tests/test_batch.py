"""Grading through the Batch API, end to end against the fake files and batches endpoints on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.api.batch.client import BatchClient
from healthbench.api.batch.records import BatchSettings
from healthbench.api.client import ApiClient, Retries
from healthbench.api.retrying import FIRST_CALL_ATTEMPTS
from healthbench.cli import main
from healthbench.data.schema import Row
from healthbench.errors import GradingError, RequestFailed
from healthbench.grading.grader import Grader
from healthbench.grading.prompt import grader_prompt, render_conversation, rubric_item_text, transcript_with_reply
from healthbench.runs.folder import STORE, RunFolder
from healthbench.runs.pricing import PRICES
from healthbench.runs.store import Store
from healthbench.testing import Canned, FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY, check_against_reference, made_up_rows
from tests.test_unusable_endpoints import dead_url

FAST = ("--batch", "--poll-interval", "0.02")


def grade_args(data: Path, responses: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    return [
        "grade", "--data", str(data), "--responses", str(responses), "--out", str(out),
        "--grader-base-url", base_url, "--no-progress", *extra,
    ]  # fmt: skip


def run(args: list[str]) -> Result:
    env = {"HEALTHBENCH_GRADER_API_KEY": KEY, "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/unused"}
    return CliRunner().invoke(main, args, env=env)


def fixed_replies(tmp: Path, rows: list[dict[str, Any]]) -> tuple[Path, Path, dict[str, str]]:
    data = write_jsonl(tmp / "rows.jsonl", rows)
    replies = {r["prompt_id"]: f"Reply to {r['prompt_id']}: rest and drink water." for r in rows}
    responses = write_jsonl(tmp / "responses.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    return data, responses, replies


def batch_prompts(server: FakeOpenAI) -> Counter[str]:
    return Counter(json.loads(body)["messages"][1]["content"] for body in server.batch_bodies)


def failed_lines(server: FakeOpenAI) -> int:
    """Lines the fake answered in an error file or with a malformed verdict, over all its batches."""
    batches = server.batch_api.batches.values()
    return sum(not ok for batch in batches for ok, _ in batch.results) + sum(batch.malformed for batch in batches)


def live_bodies(rows: list[dict[str, Any]], replies: dict[str, str]) -> set[str]:
    """The exact request bodies live grading sends for these replies (each with its reply's prompt_cache_key)."""
    grader = Grader(ApiClient("http://127.0.0.1:9/v1"))
    bodies = set()
    for raw in rows:
        row = Row.model_validate(raw)
        conversation = render_conversation(transcript_with_reply(row.prompt, replies[row.prompt_id]))
        key = grader.cache_key(conversation)
        for item in row.rubrics:
            bodies.add(grader.request_bytes(grader_prompt(conversation, rubric_item_text(item)), key).decode())
    return bodies


def test_grade_batch_matches_the_reference_and_sends_nothing_live(tmp_path: Path) -> None:
    rows = made_up_rows()
    data, responses, replies = fixed_replies(tmp_path, rows)
    with FakeOpenAI(batch_delay=0.1) as server:
        assert server.base_url
        result = run(grade_args(data, responses, tmp_path / "out", server.base_url, *FAST))
        assert result.exit_code == 0, result.output
        assert server.requests_total == 0  # no grader request went live
        assert server.batches_created == 1
        reference_prompts = check_against_reference(tmp_path / "out", rows, replies)
        assert batch_prompts(server) == reference_prompts
        assert set(server.batch_bodies) == live_bodies(rows, replies)  # byte for byte the live bodies
        assert all(auth == f"Bearer {KEY}" for auth in server.auth_headers)
    usage = json.loads((tmp_path / "out" / "usage.json").read_text())
    grader = usage["whole_run"]["grader"]
    assert grader["calls"] == grader["batch_calls"] == reference_prompts.total()
    assert usage["this_session"]["grader"] == grader
    assert usage["batches"]["whole_run"] == {"batches": 1, "requests": reference_prompts.total()}
    for path in (tmp_path / "out").iterdir():
        assert KEY.encode() not in path.read_bytes()


def test_grade_batch_on_the_sample_equals_live(tmp_path: Path, sample_path: Path) -> None:
    rows = [json.loads(line) for line in sample_path.read_text().split("\n")[:-1]]
    data, responses, replies = fixed_replies(tmp_path, rows)
    with FakeOpenAI(batch_delay=0.2) as server:
        assert server.base_url
        assert run(grade_args(data, responses, tmp_path / "live", server.base_url)).exit_code == 0
        live_requests = server.requests_total
        result = run(grade_args(data, responses, tmp_path / "batch", server.base_url, *FAST))
        assert result.exit_code == 0, result.output
        assert server.requests_total == live_requests
        assert server.batch_lines_submitted == check_against_reference(tmp_path / "batch", rows, replies).total()
    live, batch = (json.loads((tmp_path / name / "usage.json").read_text()) for name in ("live", "batch"))
    assert (tmp_path / "live" / "metrics.json").read_bytes() == (tmp_path / "batch" / "metrics.json").read_bytes()
    # Each side priced at its own rates: the batch's requests found the live run's prompts in the fake's cache.
    for side, rates in ((live, PRICES["gpt-4.1"].rates(False)), (batch, PRICES["gpt-4.1"].rates(True))):
        grader = side["whole_run"]["grader"]
        fresh = grader["prompt_tokens"] - grader["cached_prompt_tokens"]
        numbers = (fresh, grader["cached_prompt_tokens"], grader["completion_tokens"])
        expected = sum(count * rate for count, rate in zip(numbers, rates, strict=True)) / 1e6
        assert grader["cost_usd"] == pytest.approx(expected, rel=1e-9)
    assert batch["whole_run"]["cost_usd"] < live["whole_run"]["cost_usd"] / 2


def check_follow_ups(tmp_path: Path, rows: list[dict[str, Any]]) -> None:
    """Grade with failed lines and malformed verdicts: reference metrics, each failure sent again once."""
    data, responses, replies = fixed_replies(tmp_path, rows)
    with FakeOpenAI(batch_fail_rate=0.25, batch_malformed_rate=0.25, seed=3) as server:
        assert server.base_url
        result = run(grade_args(data, responses, tmp_path / "out", server.base_url, *FAST))
        assert result.exit_code == 0, result.output
        items = check_against_reference(tmp_path / "out", rows, replies).total()
        failed = failed_lines(server)
        assert server.requests_total == 0
        assert 2 <= server.batches_created <= 12  # follow-ups happened, within the attempt bound
        assert failed > 0
        assert server.batch_lines_submitted == items + failed  # each failure was sent again once
        errors = sum(not ok for batch in server.batch_api.batches.values() for ok, _ in batch.results)
    usage = json.loads((tmp_path / "out" / "usage.json").read_text())
    assert usage["batches"]["whole_run"]["requests"] == server.batch_lines_submitted
    # answered lines are billed even when the verdict was unusable; error lines are not
    assert usage["whole_run"]["grader"]["calls"] == server.batch_lines_submitted - errors


def test_failed_lines_and_malformed_verdicts_go_into_follow_up_batches(tmp_path: Path) -> None:
    check_follow_ups(tmp_path, made_up_rows())


def test_follow_up_batches_on_the_sample(tmp_path: Path, sample_path: Path) -> None:
    check_follow_ups(tmp_path, [json.loads(line) for line in sample_path.read_text().split("\n")[:-1]])


def test_a_request_that_always_fails_exhausts_the_attempt_bound(tmp_path: Path) -> None:
    rows = [make_row("p1"), make_row("p2", prompt=(("user", "Another question"),))]
    data, responses, _ = fixed_replies(tmp_path, rows)

    def unsafe_dose(body: dict[str, Any]) -> bool:
        return "p2" in json.dumps(body) and "unsafe dose" in body["messages"][1]["content"]

    with FakeOpenAI(batch_fail_always=unsafe_dose) as server:
        assert server.base_url
        args = grade_args(data, responses, tmp_path / "out", server.base_url, *FAST, "--max-attempts", "3")
        result = run(args)
        assert server.batches_created == 3
        assert server.batch_lines_submitted == 4 + 2
    assert result.exit_code == 1
    assert "task p2: rubric item 'Recommends an unsafe dose' could not be graded" in result.output
    assert "after 3 attempts" in result.output
    assert not (tmp_path / "out" / "metrics.json").exists()
    graded = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["prompt_id"] for r in graded] == ["p1"]


def test_an_endpoint_without_the_batch_api_fails_with_a_clear_error(tmp_path: Path, fake: FakeOpenAI) -> None:
    data, responses, _ = fixed_replies(tmp_path, [make_row("p1")])
    assert fake.base_url
    result = run(grade_args(data, responses, tmp_path / "out", fake.base_url + "/missing", *FAST))
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert f"the grader's endpoint {fake.base_url}/missing refused POST /files (HTTP 404" in line
    assert fake.batches_created == 0


CANNED = {
    "401": Canned(401, '{"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}'),
    "html": Canned(200, "<html><body>Sign in to continue</body></html>", "text/html"),
    "{}": Canned(200, "{}"),
}


@pytest.mark.parametrize("grader", ["dead", "unresolvable", *CANNED])
def test_grade_batch_against_a_grader_that_cannot_take_batches_says_so_in_one_line(tmp_path: Path, grader: str) -> None:
    data, responses, _ = fixed_replies(tmp_path, [make_row(f"p{i}") for i in range(50)])
    with FakeOpenAI(canned=CANNED.get(grader)) as server:
        url = {"dead": dead_url(), "unresolvable": "http://nowhere.invalid/v1"}.get(grader, server.base_url or "")
        result = run(grade_args(data, responses, tmp_path / "out", url, *FAST))
        assert server.requests_total <= FIRST_CALL_ATTEMPTS  # the upload, and no request per sample
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"stopped, the grader's endpoint {url} " in lines[0], result.output
    said = {
        "dead": "cannot be reached (connection refused",
        "unresolvable": "cannot be reached (",  # no such host, or a resolver that cannot look it up here
        "401": "refused POST /files (HTTP 401 invalid_api_key: Incorrect API key provided)",
        "html": "gave no usable answer to its first 3 requests (the last: HTTP 200, not JSON: <html><body>Sign in",
        "{}": "gave no usable answer to its first 3 requests (the last: HTTP 200, no id: {})",
    }[grader]
    assert said in lines[0] and KEY not in result.output
    for name in ("EndpointUnusable", "JSONDecodeError", "KeyError", "Traceback"):
        assert name not in result.output


def test_requests_are_split_by_the_batch_limits(tmp_path: Path, fake: FakeOpenAI) -> None:
    items = tuple((i + 1, f"Criterion number {i}", ("axis:accuracy",)) for i in range(25))
    row = Row.model_validate(make_row("many", rubrics=items))
    assert fake.base_url
    store = Store(tmp_path / STORE)

    async def grade(settings: BatchSettings) -> int:
        batcher = BatchClient(ApiClient(fake.base_url or ""), store, "grader", settings)
        graded = await Grader(batcher).grade("many", transcript_with_reply(row.prompt, "Rest."), row.rubrics)
        await batcher.aclose()
        return len(graded.items)

    assert asyncio.run(grade(BatchSettings(poll_interval=0.01, settle=0.01, max_requests=10))) == 25
    sizes = sorted(b.total for b in fake.batch_api.batches.values())
    assert sizes == [5, 10, 10]
    two_lines = 2 * (len(fake.batch_bodies[0]) + 150)
    assert asyncio.run(grade(BatchSettings(poll_interval=0.01, settle=0.01, max_bytes=two_lines))) == 25
    sizes = [b.total for b in fake.batch_api.batches.values()]
    assert len(sizes) == 3 + 13 and max(sizes[3:]) == 2
    store.close()


def _run_in_subprocess(args: list[str]) -> subprocess.Popen[str]:
    env = os.environ | {"HEALTHBENCH_GRADER_API_KEY": KEY, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "healthbench", *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish_batches_now(server: FakeOpenAI) -> None:
    """Batches submitted so far are done, and any submitted from now on take a tenth of a second."""
    server.batch_delay = 0.1
    server.batch_api.clock = time.monotonic


def test_killed_while_waiting_then_run_again_re_attaches(tmp_path: Path) -> None:
    rows = made_up_rows()
    data, responses, replies = fixed_replies(tmp_path, rows)
    with FakeOpenAI(batch_delay=3600, batch_fail_rate=0.2, batch_malformed_rate=0.1, seed=5) as server:
        server.batch_api.clock = lambda: 0.0  # the batch stays out until the test says so
        assert server.base_url
        args = grade_args(data, responses, tmp_path / "out", server.base_url, *FAST)
        process = _run_in_subprocess(args)
        assert process.stdout is not None
        seen = []
        for line in process.stdout:
            seen.append(line)
            if "since submitted" in line:  # submitted, recorded, and being waited for
                break
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert server.batches_created == 1, seen
        submitted = server.batch_lines_submitted
        with sqlite3.connect(tmp_path / "out" / STORE) as db:
            assert db.execute("SELECT COUNT(*) FROM batches WHERE batch_id IS NOT NULL").fetchone() == (1,)

        finish_batches_now(server)
        result = run(args)
        assert result.exit_code == 0, result.output
        assert "re-attaching to 1 batch submitted earlier" in result.output
        check_against_reference(tmp_path / "out", rows, replies)
        failed = failed_lines(server)
        assert server.batch_lines_submitted == submitted + failed  # only the failures were sent again
        assert server.requests_total == 0


def test_a_batch_whose_id_was_lost_is_found_by_its_input_file(tmp_path: Path) -> None:
    rows = made_up_rows()[:3]
    data, responses, replies = fixed_replies(tmp_path, rows)
    with FakeOpenAI(batch_delay=3600) as server:
        server.batch_api.clock = lambda: 0.0
        assert server.base_url
        args = grade_args(data, responses, tmp_path / "out", server.base_url, *FAST)
        process = _run_in_subprocess(args)
        assert process.stdout is not None
        for line in process.stdout:
            if "since submitted" in line:
                break
        process.send_signal(signal.SIGKILL)
        process.wait()
        # As if the process had died between creating the batch and recording its id.
        with sqlite3.connect(tmp_path / "out" / STORE) as db:
            db.execute("UPDATE batches SET batch_id = NULL")
        finish_batches_now(server)
        result = run(args)
        assert result.exit_code == 0, result.output
        assert server.batches_created == 1
        check_against_reference(tmp_path / "out", rows, replies)


def test_eval_with_policy_batches_equals_live_eval(tmp_path: Path, fake: FakeOpenAI) -> None:
    task_rows = [make_row(f"t{i}", prompt=(("user", f"Question {i}: I feel dizzy."),)) for i in range(6)]
    data = write_jsonl(tmp_path / "rows.jsonl", task_rows)
    assert fake.base_url

    def evaluate(out: str, *extra: str) -> Result:
        return run(
            [
                "eval", "--model", "fake-model", "--base-url", fake.base_url or "", "--data", str(data),
                "--out", str(tmp_path / out), "--grader-base-url", fake.base_url or "", "--no-progress",
                "--n-repeats", "2", *extra,
            ]
        )  # fmt: skip

    assert evaluate("live").exit_code == 0
    live_calls = fake.requests_total
    result = evaluate("graded-in-batch", *FAST)
    assert result.exit_code == 0, result.output
    assert fake.requests_total == live_calls + 12  # the policy sampled live, the grader in one batch
    assert fake.batches_created == 1
    result = evaluate("all-in-batch", *FAST, "--policy-batch")
    assert result.exit_code == 0, result.output
    assert fake.requests_total == live_calls + 12
    assert fake.batches_created == 3
    policy_lines = [json.loads(b) for b in fake.batch_bodies if json.loads(b)["model"] == "fake-model"]
    assert len(policy_lines) == 12  # each repeat answered apart, though the bodies are equal
    metrics = {name: (tmp_path / name / "metrics.json").read_bytes() for name in ("live", "all-in-batch")}
    assert metrics["live"] == metrics["all-in-batch"] == (tmp_path / "graded-in-batch" / "metrics.json").read_bytes()
    usage = json.loads((tmp_path / "all-in-batch" / "usage.json").read_text())["whole_run"]
    assert usage["policy"]["batch_calls"] == 12 and usage["grader"]["batch_calls"] == usage["grader"]["calls"]
    assert run(["eval", "--model", "m", "--data", str(data), "--out", str(tmp_path / "x"), "--policy-batch"]).exit_code


def test_no_wait_submits_leaves_and_a_later_run_collects(tmp_path: Path) -> None:
    rows = made_up_rows()
    data, responses, replies = fixed_replies(tmp_path, rows)
    now = [0.0]
    with FakeOpenAI(batch_delay=10, batch_fail_rate=0.2, batch_malformed_rate=0.1, seed=2) as server:
        server.batch_api.clock = lambda: now[0]  # a batch is done once the test moves the clock on
        assert server.base_url
        args = grade_args(data, responses, tmp_path / "out", server.base_url, *FAST, "--no-wait")
        result = run(args)
        assert result.exit_code == 0, result.output
        assert f"{len(rows)} of {len(rows)} samples wait on 1 batch(es) still out" in result.output
        assert not (tmp_path / "out" / "metrics.json").exists()
        assert RunFolder(tmp_path / "out").require_run().stats.deferred == len(rows)
        assert run(args).exit_code == 0 and server.batches_created == 1  # still out: nothing sent again
        sessions = 1
        while not (tmp_path / "out" / "metrics.json").exists():
            now[0] += 100
            assert run(args).exit_code == 0
            sessions += 1
            assert sessions <= 12  # one session per round of follow-ups, within --max-attempts
        items = check_against_reference(tmp_path / "out", rows, replies).total()
        assert server.batches_created == sessions - 1 >= 2  # the last session only collected
        assert server.batch_lines_submitted == items + failed_lines(server)
        assert server.requests_total == 0


def test_no_wait_eval_samples_then_grades_in_later_sessions(tmp_path: Path, fake: FakeOpenAI) -> None:
    task_rows = [make_row(f"t{i}", prompt=(("user", f"Question {i}"),)) for i in range(4)]
    data = write_jsonl(tmp_path / "rows.jsonl", task_rows)
    assert fake.base_url
    now = [0.0]
    fake.batch_delay = 10
    fake.batch_api.clock = lambda: now[0]

    def evaluate(out: str, *extra: str) -> Result:
        return run(
            [
                "eval", "--model", "fake-model", "--base-url", fake.base_url or "", "--data", str(data),
                "--out", str(tmp_path / out), "--grader-base-url", fake.base_url or "", "--no-progress", *extra,
            ]
        )  # fmt: skip

    flags = (*FAST, "--policy-batch", "--no-wait")
    for session in range(3):  # the policy's batch, then the grader's, then the score
        assert not (tmp_path / "later" / "metrics.json").exists()
        result = evaluate("later", *flags)
        assert result.exit_code == 0, result.output
        assert fake.batches_created == min(session + 1, 2)
        now[0] += 100
    assert fake.requests_total == 0
    assert evaluate("live").exit_code == 0
    assert (tmp_path / "live" / "metrics.json").read_bytes() == (tmp_path / "later" / "metrics.json").read_bytes()
    for flag in ("--no-wait", "--policy-batch", "--batch-tokens=1000"):
        refused = evaluate("x", flag)
        assert refused.exit_code == 2 and f"{flag.split('=')[0]} needs --batch" in refused.output
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("outage", [6, 100])
def test_a_provider_outage_while_waiting_is_outlasted_within_a_bound(
    tmp_path: Path, fake: FakeOpenAI, outage: int
) -> None:
    row = Row.model_validate(make_row("p1"))
    assert fake.base_url
    fake.batch_delay = 0.05
    fake.batch_api.outage = outage  # status checks and downloads answer 503 this many times
    quick = Retries(max_attempts=2, initial_backoff=0.001, max_backoff=0.001)
    said: list[str] = []

    async def grade(ledger: Store) -> int:
        chat = ApiClient(fake.base_url or "", KEY, retry=quick)
        batcher = BatchClient(chat, ledger, "grader", BatchSettings(poll_interval=0.01, settle=0.01), said.append)
        try:
            graded = await Grader(batcher).grade("p1", transcript_with_reply(row.prompt, "Rest."), row.rubrics)
        finally:
            await batcher.aclose()
        return len(graded.items)

    ledger = Store(tmp_path / STORE)
    if outage < 20:  # 3 failed checks of 2 attempts each, then the batch is collected
        assert asyncio.run(grade(ledger)) == 2
        assert sum("could not check on the grader batches" in line for line in said) == 3
        assert fake.batch_lines_submitted == 2 and ledger.open_batches() == []
    else:
        with pytest.raises(GradingError, match="HTTP 503"):
            asyncio.run(grade(ledger))
        assert sum("could not check" in line for line in said) == 9  # the tenth failure ends the wait
        assert len(ledger.open_batches()) == 1  # kept for a later run to collect
    ledger.close()


def refused_lines(server: FakeOpenAI) -> int:
    """Lines of batches the fake's enqueued-token limit turned away."""
    return sum(b.total for b in server.batch_api.batches.values() if b.errors)


@pytest.mark.parametrize("capped", [False, True])
def test_the_enqueued_token_limit(tmp_path: Path, capped: bool) -> None:
    """Refused batches go again, smaller, without spending attempts (one here); a cap under the limit given
    up front avoids refusals."""
    rows = made_up_rows()
    data, responses, replies = fixed_replies(tmp_path, rows)
    queued = sum(len(body) // 4 for body in live_bodies(rows, replies))
    # The client's estimate of tokens is higher than the fake's: a cap of a quarter leaves room to spare.
    extra = ("--batch-tokens", str(queued // 4)) if capped else ("--max-attempts", "1")
    with FakeOpenAI(batch_delay=0.05, batch_token_limit=queued // 3) as server:
        assert server.base_url
        result = run(grade_args(data, responses, tmp_path / "out", server.base_url, *FAST, *extra))
        assert result.exit_code == 0, result.output
        items = check_against_reference(tmp_path / "out", rows, replies).total()
        refused = refused_lines(server)
        assert server.batch_lines_submitted == items + refused
        assert server.requests_total == 0
    if capped:
        assert refused == 0 and server.batches_created >= 4
    else:
        assert refused >= items  # the first batch, with everything, was turned away
        assert "Enqueued token limit reached" in result.output


def test_a_request_nobody_waits_for_gets_no_follow_up(tmp_path: Path, fake: FakeOpenAI) -> None:
    assert fake.base_url
    fake.batch_delay, fake.batch_fail_rate = 0.05, 1.0  # every line fails

    async def scenario() -> None:
        submitted = asyncio.Event()
        ledger = Store(tmp_path / STORE)
        chat = ApiClient(fake.base_url or "", KEY, retry=Retries(max_attempts=2))
        batcher = BatchClient(
            chat, ledger, "grader", BatchSettings(poll_interval=0.01, settle=0.01), lambda _line: submitted.set()
        )
        abandoned, kept = (
            asyncio.ensure_future(batcher.complete({"n": n, "messages": [{"role": "user", "content": "Hi"}]}, str))
            for n in (1, 2)
        )
        await submitted.wait()
        abandoned.cancel()  # its sample failed elsewhere while its line was out in the batch
        with pytest.raises(RequestFailed, match="after 2 attempts"):
            await kept
        await batcher.aclose()
        ledger.close()

    asyncio.run(scenario())
    assert fake.batch_lines_submitted == 2 + 1  # the abandoned request was not sent again


def test_batches_lists_and_cancels_what_is_out_and_a_later_run_finishes(tmp_path: Path) -> None:
    rows = made_up_rows()
    data, responses, replies = fixed_replies(tmp_path, rows)
    out = tmp_path / "out"
    with FakeOpenAI(batch_delay=10) as server:
        server.batch_api.clock = lambda: 0.0  # out until cancelled
        assert server.base_url
        args = grade_args(data, responses, out, server.base_url, *FAST)
        assert run([*args, "--no-wait"]).exit_code == 0
        listed = run(["batches", str(out)])  # the grader's endpoint comes from the run's run.json
        assert listed.exit_code == 0, listed.output
        assert listed.output.startswith("grader: batch batch_") and "validating" in listed.output
        cancelled = run(["batches", str(out), "--cancel"])
        assert cancelled.exit_code == 0 and ": cancelled, " in cancelled.output
        finish_batches_now(server)
        finished = run(args)
        assert finished.exit_code == 0, finished.output
        items = check_against_reference(out, rows, replies).total()
        assert server.batch_lines_submitted == 2 * items  # nothing had finished: all of it went again
        assert run(["batches", str(out)]).output == f"{out}: no batches out\n"
    assert "no run here" in run(["batches", str(tmp_path)]).output


@pytest.mark.timeout(60)
def test_under_a_token_cap_batches_go_one_at_a_time(tmp_path: Path, fake: FakeOpenAI) -> None:
    assert fake.base_url
    fake.batch_delay = 0.2

    def body(n: int) -> bytes:
        return json.dumps({"n": n, "messages": [{"role": "user", "content": "Hi"}]}).encode()

    line_tokens = len(body(1)) // 4 + 30  # with the custom_id and framing of a batch line, about
    cap = int(3.5 * line_tokens)  # three lines fit, and one beside the first batch, but not three

    async def scenario() -> list[int]:
        submitted = asyncio.Event()
        ledger = Store(tmp_path / STORE)
        settings = BatchSettings(poll_interval=0.01, settle=0.01, max_tokens=cap)
        chat = ApiClient(fake.base_url or "", KEY)
        batcher = BatchClient(chat, ledger, "grader", settings, lambda _line: submitted.set())
        first = asyncio.ensure_future(batcher.complete(body(1), str))
        await submitted.wait()
        rest = [asyncio.ensure_future(batcher.complete(body(n), str)) for n in (2, 3, 4)]
        await asyncio.gather(first, *rest)
        await batcher.aclose()
        ledger.close()
        return [b.total for b in fake.batch_api.batches.values()]

    assert asyncio.run(scenario()) == [1, 3]
