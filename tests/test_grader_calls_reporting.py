"""A run graded per reply is never taken for the official score: the report, the leaderboard, `compare` and
metrics.json; and the report and the leaderboard show what the prompt cache saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY
from tests.test_metaeval import made_up_meta_rows

LONG = "Drink water, rest, and watch for a stiff neck or a rash that does not fade. " * 80


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"HEALTHBENCH_GRADER_API_KEY": KEY})


@pytest.fixture
def runs(tmp_path: Path, fake: FakeOpenAI) -> dict[str, Path]:
    """The same replies graded per item and per reply."""
    rows = [make_row(f"t{i}", prompt=(("user", f"Question {i}: my head hurts."),)) for i in range(12)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    responses = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": r["prompt_id"], "response": LONG} for r in rows])
    assert fake.base_url
    out = {}
    for mode in ("per-item", "per-reply"):
        out[mode] = tmp_path / mode
        args = ["grade", "--data", str(data), "--responses", str(responses), "--out", str(out[mode]), "--report"]
        result = invoke(*args, "--grader-base-url", fake.base_url, "--no-progress", "--grader-calls", mode)
        assert result.exit_code == 0, result.output
    return out


def test_metrics_keep_the_reference_s_keys_in_either_mode(runs: dict[str, Path]) -> None:
    item, reply = (json.loads((runs[mode] / "metrics.json").read_text()) for mode in ("per-item", "per-reply"))
    assert item.keys() == reply.keys()


def test_the_report_names_the_mode_and_the_cache(runs: dict[str, Path]) -> None:
    item, reply = ((runs[mode] / "report.html").read_text() for mode in ("per-item", "per-reply"))
    assert 'id="per-reply"' in reply and "not HealthBench's official grading" in reply
    assert 'id="per-reply"' not in item
    assert "one per rubric item (per-item, the reference&#39;s)" in item and "one per reply (per-reply)" in reply
    usage = json.loads((runs["per-item"] / "usage.json").read_text())["whole_run"]["grader"]
    rate = usage["cached_prompt_tokens"] / usage["prompt_tokens"]
    assert rate > 0
    assert f"grader: {rate:.0%} of prompt tokens read from the prompt cache" in item
    assert f"{usage['cached_prompt_tokens']:,} of {usage['prompt_tokens']:,}" in item


def test_the_leaderboard_marks_every_per_reply_row_and_shows_the_cost(tmp_path: Path, runs: dict[str, Path]) -> None:
    result = invoke(
        "leaderboard", str(runs["per-item"]), str(runs["per-reply"]), "--json", "--out", str(tmp_path / "b.html")
    )
    assert result.exit_code == 0, result.output
    board = {Path(run["run"]).name: run for run in json.loads(result.stdout)["runs"]}
    assert board["per-reply"]["grader_calls"] == "per-reply" and "per-reply" in board["per-reply"]["grader"]
    assert [mark["kind"] for mark in board["per-reply"]["marks"]] == ["per-reply"]
    assert board["per-item"]["marks"] == [] and board["per-item"]["grader_calls"] == "per-item"
    item = board["per-item"]
    usage = json.loads((runs["per-item"] / "usage.json").read_text())["whole_run"]
    assert item["cost_usd"] == usage["cost_usd"]
    assert item["grader_cache_saved_usd"] == usage["grader"]["cache_saved_usd"] > 0
    assert item["cost"] == f"${usage['cost_usd']:,.2f} (grader cache {item['grader_cache_hit_rate']:.0%}, " + (
        f"${usage['grader']['cache_saved_usd']:,.2f} saved)"
    )
    page = (tmp_path / "b.html").read_text()
    assert item["cost"] in page and 'title="one grader call for all' in page
    # A board of per-reply runs only still marks each of them.
    alone = invoke("leaderboard", str(runs["per-reply"]), "--json", "--out", str(tmp_path / "c.html"))
    [run] = json.loads(alone.stdout)["runs"]
    assert [mark["kind"] for mark in run["marks"]] == ["per-reply"]
    markdown = invoke("leaderboard", str(runs["per-item"]), str(runs["per-reply"]), "--out", str(tmp_path / "d.html"))
    headline = [line.split(" | ") for line in markdown.stdout.split("\n\n")[1].splitlines()]
    assert headline[0][5:7] == ["differs", "n"]
    [row] = [cells for cells in headline if cells[1].endswith("per-reply")]
    assert row[5] == "per-reply" and row[3].endswith("per-reply)")  # its "differs" and "grader" columns


def test_compare_between_modes_says_so_first(runs: dict[str, Path]) -> None:
    mixed = invoke("compare", str(runs["per-item"]), str(runs["per-reply"]))
    assert mixed.exit_code == 0, mixed.output
    assert mixed.output.splitlines()[0].startswith("GRADER CALLS DIFFER: A was graded per-item")
    as_json = json.loads(invoke("compare", str(runs["per-item"]), str(runs["per-reply"]), "--json").output)
    assert as_json["grader_calls"] == {"a": "per-item", "b": "per-reply"} and as_json["grader_calls_mismatch"]
    same = invoke("compare", str(runs["per-item"]), str(runs["per-item"]))
    assert "GRADER CALLS" not in same.output


def test_compare_sets_two_meta_evals_side_by_side(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(40))
    assert fake.base_url
    for mode in ("per-item", "per-reply"):
        args = ["meta-eval", "--data", str(data), "--out", str(tmp_path / mode), "--grader-base-url", fake.base_url]
        assert invoke(*args, "--no-progress", "--grader-calls", mode).exit_code == 0
    result = invoke("compare", str(tmp_path / "per-item"), str(tmp_path / "per-reply"))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("GRADER CALLS DIFFER:") and lines[2].startswith("macro F1 [95% interval]")
    figures: dict[str, Any] = json.loads(
        invoke("compare", str(tmp_path / "per-item"), str(tmp_path / "per-reply"), "--json").output
    )
    assert [run["grader_calls"] for run in figures["runs"]] == ["per-item", "per-reply"] and figures["paired"]
    graded = write_jsonl(tmp_path / "rows.jsonl", [make_row("a")])
    responses = write_jsonl(tmp_path / "r.jsonl", [{"prompt_id": "a", "response": "Rest."}])
    grade = ["grade", "--data", str(graded), "--responses", str(responses), "--out", str(tmp_path / "g")]
    assert invoke(*grade, "--grader-base-url", fake.base_url, "--no-progress").exit_code == 0
    mixed = invoke("compare", str(tmp_path / "per-item"), str(tmp_path / "g"))
    assert mixed.exit_code == 1 and f"{tmp_path / 'per-item'}: a meta-eval run grades the grader" in mixed.output
    assert "or two meta-eval runs" in mixed.output
