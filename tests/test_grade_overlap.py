"""`grade` on the tasks both the data and the replies name: replies for the full set graded on a part of it,
with the counts of what was left out on stderr; `--strict` and a disjoint file refuse, duplicates always do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.data import cache, subsets
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY, check_against_reference, made_up_rows, sent_prompts


def grade(tmp: Path, responses: Path, base_url: str, *data: str) -> Result:
    args = ["grade", *data, "--responses", str(responses), "--out", str(tmp / "out"), "--grader-base-url", base_url]
    return CliRunner().invoke(main, [*args, "--no-progress"], env={"HEALTHBENCH_GRADER_API_KEY": KEY})


def replies_for(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {r["prompt_id"]: f"Reply to {r['prompt_id']}: rest, and see a doctor if it worsens." for r in rows}


def write_replies(path: Path, replies: dict[str, str]) -> Path:
    return write_jsonl(path, [{"prompt_id": k, "response": v} for k, v in replies.items()])


def graded_ids(out: Path) -> list[str]:
    return [json.loads(line)["prompt_id"] for line in (out / "results.jsonl").read_text().split("\n") if line]


def test_a_subset_graded_from_replies_to_the_full_set(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The common case: `--subset hard` with the full set's replies (made-up rows under the official name).
    everything = made_up_rows()
    hard = everything[2:9]
    write_jsonl(tmp_path / subsets.SUBSETS["hard"].filename, hard)
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(tmp_path))
    monkeypatch.setenv(cache.OVERRIDE_ENV, "1")  # made-up rows stand in for the official file
    replies = replies_for(everything)
    responses = write_replies(tmp_path / "full_replies.jsonl", replies)
    assert fake.base_url
    result = grade(tmp_path, responses, fake.base_url, "--subset", "hard")
    assert result.exit_code == 0, result.output
    ours = {r["prompt_id"]: replies[r["prompt_id"]] for r in hard}
    assert sent_prompts(fake) == check_against_reference(tmp_path / "out", hard, ours)
    assert sorted(graded_ids(tmp_path / "out")) == sorted(ours)
    assert "15 of 22 replies were not graded (tasks outside the data, ignored)" in result.stderr
    assert "0 of the data's 7 tasks have no reply" in result.stderr
    assert "not graded" not in result.stdout  # the counts go to stderr, beside the other diagnostics


def test_tasks_without_a_reply_are_counted_and_not_graded(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = replies_for(rows[:15]) | {"elsewhere-1": "a", "elsewhere-2": "b", "elsewhere-3": "c"}
    responses = write_replies(tmp_path / "replies.jsonl", replies)
    assert fake.base_url
    result = grade(tmp_path, responses, fake.base_url, "--data", str(data))
    assert result.exit_code == 0, result.output
    ours = {k: v for k, v in replies.items() if not k.startswith("elsewhere")}
    assert sent_prompts(fake) == check_against_reference(tmp_path / "out", rows[:15], ours)
    assert "grading the 15 tasks both the data and replies.jsonl name" in result.stderr
    assert "3 of 18 replies were not graded" in result.stderr
    assert "7 of the data's 22 tasks have no reply (not graded)" in result.stderr


def test_full_overlap_says_nothing(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()[:3]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    responses = write_replies(tmp_path / "replies.jsonl", replies_for(rows))
    assert fake.base_url
    result = grade(tmp_path, responses, fake.base_url, "--data", str(data))
    assert result.exit_code == 0, result.output
    assert "not graded" not in result.output


def test_strict_and_disjoint_replies_are_refused(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("a"), make_row("b")])
    responses = write_replies(tmp_path / "replies.jsonl", {"a": "x", "zz": "y"})
    assert fake.base_url
    strict = grade(tmp_path, responses, fake.base_url, "--data", str(data), "--strict")
    assert strict.exit_code == 1
    assert f"Error: {responses}:2: field prompt_id: 'zz' is not a task of the data" in strict.stderr
    write_replies(responses, {"x": "1", "y": "2", "z": "3"})
    disjoint = grade(tmp_path, responses, fake.base_url, "--data", str(data))
    assert disjoint.exit_code == 1
    assert f"{responses}: none of its 3 replies names one of the data's 2 tasks" in disjoint.stderr
    assert "line 1: field prompt_id: 'x' is not a task of the data" in disjoint.stderr
    assert "Traceback" not in disjoint.output and fake.requests_total == 0


@pytest.mark.parametrize("strict", [(), ("--strict",)], ids=["default", "strict"])
@pytest.mark.parametrize("twice", ["a", "outside"])
def test_a_duplicate_prompt_id_names_file_and_line(
    tmp_path: Path, fake: FakeOpenAI, strict: tuple[str, ...], twice: str
) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("a"), make_row("outside" if strict else "b")])
    lines = [{"prompt_id": "a", "response": "x"}, {"prompt_id": "outside", "response": "y"}]
    responses = write_jsonl(tmp_path / "replies.jsonl", [*lines, {"prompt_id": twice, "response": "z"}])
    assert fake.base_url
    result = grade(tmp_path, responses, fake.base_url, "--data", str(data), *strict)
    assert result.exit_code == 1
    first = 1 if twice == "a" else 2
    assert f"{responses}:3: field prompt_id: duplicate {twice!r}, first on line {first}" in result.stderr
    assert fake.requests_total == 0


def test_100_sample_tasks_with_replies_for_all_500(tmp_path: Path, sample_path: Path, fake: FakeOpenAI) -> None:
    everything = [json.loads(line) for line in sample_path.read_text(encoding="utf-8").split("\n") if line]
    assert len(everything) == 500
    part = everything[:100]
    data = write_jsonl(tmp_path / "part.jsonl", part)  # in tmp only: the repository never holds real rows
    replies = replies_for(everything)
    responses = write_replies(tmp_path / "replies.jsonl", replies)
    assert fake.base_url
    result = grade(tmp_path, responses, fake.base_url, "--data", str(data))
    assert result.exit_code == 0, result.output
    ours = {r["prompt_id"]: replies[r["prompt_id"]] for r in part}
    assert sent_prompts(fake) == check_against_reference(tmp_path / "out", part, ours)
    assert sorted(graded_ids(tmp_path / "out")) == sorted(ours)
    assert "400 of 500 replies were not graded" in result.stderr
    assert "0 of the data's 100 tasks have no reply" in result.stderr
