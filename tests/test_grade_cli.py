"""`healthbench grade` end to end against a loopback grader, checked against a reference-style computation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.runs.folder import RunFolder
from healthbench.runs.records import UsageRecord
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY, check_against_reference, made_up_rows, sent_prompts


def grade(tmp: Path, data: Path, responses: Path, out: str, base_url: str, *extra: str) -> Result:
    return CliRunner().invoke(
        main,
        [
            "grade",
            "--data",
            str(data),
            "--responses",
            str(responses),
            "--out",
            str(tmp / out),
            "--grader-base-url",
            base_url,
            "--no-progress",
            *extra,
        ],
        env={"HEALTHBENCH_GRADER_API_KEY": KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/never-used"},
    )


def grade_replies(
    tmp: Path, rows: list[dict[str, Any]], replies: dict[str, str], out: str, base_url: str, *extra: str
) -> Result:
    """`grade` on `rows` and `replies` (prompt_id to reply), written first to rows.jsonl and replies.jsonl in `tmp`."""
    data = write_jsonl(tmp / "rows.jsonl", rows)
    responses = write_jsonl(tmp / "replies.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    return grade(tmp, data, responses, out, base_url, *extra)


def test_made_up_rows_match_the_reference(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = {r["prompt_id"]: f"Reply to {r['prompt_id']}: stay hydrated." for r in rows}
    responses = write_jsonl(tmp_path / "responses.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    assert fake.base_url
    result = grade(tmp_path, data, responses, "out", fake.base_url)
    assert result.exit_code == 0, result.output
    assert sent_prompts(fake) == check_against_reference(tmp_path / "out", rows, replies)
    assert fake.auth_headers[0] == f"Bearer {KEY}"
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().split("\n")[:-1]]
    assert {r["prompt_id"] for r in results} == set(replies)
    first = next(r for r in results if r["prompt_id"] == "multi")
    assert first["response"] == replies["multi"]
    assert [i["points"] for i in first["rubric_items"]] == [7, -8, 5, -2]
    assert all(isinstance(i["criteria_met"], bool) and i["explanation"] for i in first["rubric_items"])
    assert first["usage"]["calls"] == 4
    assert not (tmp_path / "out" / "report.html").exists()  # grade writes one only when asked (--report)
    for path in (tmp_path / "out").iterdir():
        assert KEY.encode() not in path.read_bytes()
    assert KEY not in result.output


def test_sample_matches_the_reference_and_is_deterministic(tmp_path: Path, sample_path: Path, fake: FakeOpenAI) -> None:
    rows = [json.loads(line) for line in sample_path.read_text().split("\n")[:-1]]
    replies = {r["prompt_id"]: "I am not a doctor, but please seek care if this gets worse." for r in rows}
    responses = write_jsonl(tmp_path / "responses.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    assert fake.base_url
    result = grade(tmp_path, sample_path, responses, "a", fake.base_url)
    assert result.exit_code == 0, result.output
    assert sent_prompts(fake) == check_against_reference(tmp_path / "a", rows, replies)
    assert len(fake.bodies) == 5965  # one call per rubric item, repeated criteria included, as the reference
    assert grade(tmp_path, sample_path, responses, "b", fake.base_url).exit_code == 0
    assert (tmp_path / "a" / "metrics.json").read_bytes() == (tmp_path / "b" / "metrics.json").read_bytes()


def test_faults_do_not_change_the_metrics(tmp_path: Path) -> None:
    rows = made_up_rows() * 1
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = {r["prompt_id"]: "Rest." for r in rows}
    responses = write_jsonl(tmp_path / "responses.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    faults = ("429", "500", "503", "drop", "badjson", "prose", "null", "string_verdict")
    with FakeOpenAI() as clean, FakeOpenAI(fault_rate=0.25, faults=faults, seed=1) as faulty:
        assert clean.base_url and faulty.base_url
        assert grade(tmp_path, data, responses, "clean", clean.base_url).exit_code == 0
        result = grade(tmp_path, data, responses, "faulty", faulty.base_url)
        assert result.exit_code == 0, result.output
        assert faulty.responses_by_kind["ok"] == len(clean.bodies) < faulty.requests_total
        expected = check_against_reference(tmp_path / "faulty", rows, replies)
        assert sent_prompts(clean) == expected
        assert set(sent_prompts(faulty)) == set(expected)  # retries repeat identical requests, nothing else
    assert (tmp_path / "clean" / "metrics.json").read_bytes() == (tmp_path / "faulty" / "metrics.json").read_bytes()


def test_ungradable_task_fails_loudly_and_keeps_the_rest(tmp_path: Path) -> None:
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = {r["prompt_id"]: "Rest." for r in rows}
    responses = write_jsonl(tmp_path / "responses.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])

    def ungradable(body: dict[str, Any]) -> bool:
        return "aspirin" in body["messages"][1]["content"]

    with FakeOpenAI(fail_always=ungradable) as server:
        assert server.base_url
        result = grade(tmp_path, data, responses, "out", server.base_url, "--max-attempts", "2")
    assert result.exit_code == 1
    assert "task multi: rubric item 'Recommends aspirin for a child' could not be graded" in result.output
    assert "after 2 attempts" in result.output and "no score written" in result.output
    assert not (tmp_path / "out" / "metrics.json").exists()
    kept = [json.loads(line)["prompt_id"] for line in (tmp_path / "out" / "results.jsonl").read_text().split("\n")[:-1]]
    assert sorted(kept) == sorted(set(replies) - {"multi"})
    assert RunFolder(tmp_path / "out").require_run().stats.failed == 1

    with FakeOpenAI() as server:  # the grader recovers: only what was never answered is asked again
        assert server.base_url
        result = grade(tmp_path, data, responses, "out", server.base_url)
        assert result.exit_code == 0, result.output
        assert 1 <= server.requests_total <= 4
        assert all("Two." in b["messages"][1]["content"] for b in server.bodies)
        check_against_reference(tmp_path / "out", rows, replies)
    # Each line counts its sample's own calls, those of the session before included: a call per rubric item, and
    # the lines add up to the whole run in usage.json.
    folder = RunFolder(tmp_path / "out")
    lines, usage = folder.read_results(), folder.read(UsageRecord)
    assert usage is not None and usage.whole_run.grader is not None
    items = {r["prompt_id"]: len(r["rubrics"]) for r in rows}
    assert all(line.usage is not None and line.usage.calls == items[line.prompt_id] for line in lines)
    for figure in ("calls", "prompt_tokens", "completion_tokens"):
        assert sum(getattr(line.usage, figure) for line in lines) == getattr(usage.whole_run.grader, figure)


def test_bad_responses_file_is_named(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("a")])
    responses = write_jsonl(
        tmp_path / "responses.jsonl", [{"prompt_id": "a", "response": "x"}, {"prompt_id": "zz", "response": "y"}]
    )
    assert fake.base_url
    result = grade(tmp_path, data, responses, "out", fake.base_url, "--strict")
    assert result.exit_code == 1
    assert f"{responses}:2: field prompt_id: 'zz' is not a task of the data" in result.output
    write_jsonl(responses, [{"prompt_id": "a"}])
    result = grade(tmp_path, data, responses, "out", fake.base_url)
    assert f"{responses}:1: field response: Field required" in result.output
    assert fake.requests_total == 0


def test_identical_requests_of_different_items_and_samples_are_graded_apart(tmp_path: Path, fake: FakeOpenAI) -> None:
    twice = (5, "Advises rest", ("axis:accuracy",))
    rows = [make_row(p, rubrics=(twice, (3, "Asks about fever", ("axis:completeness",)), twice)) for p in ("p1", "p2")]
    rows[1]["prompt"] = rows[0]["prompt"]  # the same conversation and reply: every request of p2 is one of p1's
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = [{"prompt_id": p, "response": "Rest."} for p in ("p1", "p2")]
    responses = write_jsonl(tmp_path / "responses.jsonl", replies)
    assert fake.base_url
    result = grade(tmp_path, data, responses, "out", fake.base_url)
    assert result.exit_code == 0, result.output
    assert fake.requests_total == 6 and len(sent_prompts(fake)) == 2  # one call per item, as the reference makes
    usage = json.loads((tmp_path / "out" / "usage.json").read_text())
    assert usage["this_session"]["grader"]["calls"] == usage["whole_run"]["grader"]["calls"] == 6
    again = grade(tmp_path, data, responses, "out", fake.base_url)
    assert again.exit_code == 0 and fake.requests_total == 6  # resumed: each item's verdict is kept
