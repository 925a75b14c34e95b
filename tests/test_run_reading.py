"""One reading of a run folder: a results.jsonl line that is not a record, or one whose sample an earlier line
holds, is refused with the file and the line by every command that reads it (`report`, `compare`,
`leaderboard`); and the leaderboard ranks runs on different task sets apart, its headline interval a bootstrap
over tasks. The folders are copies of tests/data/v1-runs (made-up rows only)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthbench.cli import main
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl

V1 = Path(__file__).parent / "data" / "v1-runs"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return Path(shutil.copytree(V1, tmp_path / "runs"))


def readers(folder: Path, other: Path) -> dict[str, list[str]]:
    """Each command that reads a finished run's results.jsonl, on `folder`."""
    return {
        "report": ["report", str(folder)],
        "compare": ["compare", str(other), str(folder)],
        "compare --json": ["compare", str(folder), str(other), "--json"],
        "leaderboard": ["leaderboard", str(other), str(folder), "--out", str(folder.parent / "board.html")],
    }


def refused_alike(folder: Path, other: Path, said: str) -> None:
    for name, command in readers(folder, other).items():
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 1, (name, result.output)
        assert said in result.output and "Traceback" not in result.output, (name, result.output)


def test_a_duplicated_line_is_refused_with_file_and_line_by_every_reader(runs: Path) -> None:
    folder = runs / "grade"
    lines = (folder / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "results.jsonl").write_text("".join([*lines, lines[2]]), encoding="utf-8")
    metrics = (folder / "metrics.json").read_text(encoding="utf-8")
    said = f"{folder / 'results.jsonl'}: line 9: sample 't3' repeat 0 appears twice (first on line 3)"
    refused_alike(folder, runs / "grade-b", said)
    # report refused before it rewrote anything: the copy is not counted into metrics.json.
    assert (folder / "metrics.json").read_text(encoding="utf-8") == metrics


def test_a_garbage_line_is_refused_with_file_and_line_by_every_reader(runs: Path) -> None:
    folder = runs / "eval"
    lines = (folder / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[4] = "}{ not a record\n"
    (folder / "results.jsonl").write_text("".join(lines), encoding="utf-8")
    refused_alike(folder, runs / "eval-b", f"{folder / 'results.jsonl'}: line 5: not a JSON object")


def test_the_leaderboard_ranks_runs_on_other_task_sets_apart(runs: Path) -> None:
    # "small" is grade's first three tasks (a --limit 3 run): its score is not comparable with the 8-task runs.
    small = Path(shutil.copytree(runs / "grade", runs / "small"))
    kept = (small / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:3]
    (small / "results.jsonl").write_text("".join(kept), encoding="utf-8")
    run = json.loads((small / "run.json").read_text(encoding="utf-8")) | {"limit": 3, "samples": 3}
    (small / "run.json").write_text(json.dumps(run), encoding="utf-8")
    assert CliRunner().invoke(main, ["report", str(small)]).exit_code == 0  # its metrics.json, of its 3 tasks
    names = [str(runs / name) for name in ("grade-b", "small", "grade", "eval")]
    result = CliRunner().invoke(main, ["leaderboard", *names, "--out", str(runs / "board.html"), "--json"])
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    rows = {Path(row["run"]).name: row for row in board["runs"]}
    assert rows["small"]["task_set"] == "rows.jsonl sha256:6c7108f787a8, limit 3: 3 tasks"
    assert rows["grade"]["task_set"] == rows["eval"]["task_set"] == "rows.jsonl sha256:6c7108f787a8: 8 tasks"
    # Ranked among its own task set only: small is first of one run, the others 1, 2, 3 among themselves.
    assert rows["small"]["rank"] == 1
    same = [row for row in board["runs"] if row["n_tasks"] == 8]
    assert [row["rank"] for row in same] == [1, 2, 3]
    assert [row["score"] for row in same] == sorted((row["score"] for row in same), reverse=True)
    kinds = {name: [mark["kind"] for mark in row["marks"]] for name, row in rows.items()}
    assert kinds == {"small": ["not comparable"], "grade": [], "grade-b": [], "eval": []}
    assert "limit 3: 3 tasks" in rows["small"]["marks"][0]["detail"]
    assert any(sentence.startswith("task sets differ: ") for sentence in board["differences"])
    # eval's 16 samples are 8 tasks of 2 repeats: the interval resamples the 8 tasks, not 16 samples.
    assert (rows["eval"]["n_samples"], rows["eval"]["n_tasks"]) == (16, 8)
    markdown = CliRunner().invoke(main, ["leaderboard", *names, "--out", str(runs / "board.html")])
    assert "| not comparable |" in markdown.stdout


def test_a_resumed_run_writes_results_afresh_from_its_store(tmp_path: Path) -> None:
    # A resumed run never reads results.jsonl: a broken or duplicated line is replaced by what its store holds,
    # and nothing is graded twice (every verdict is in the store already).
    rows = write_jsonl(tmp_path / "rows.jsonl", [make_row(f"p{i}") for i in range(3)])
    replies = write_jsonl(tmp_path / "r.jsonl", [{"prompt_id": f"p{i}", "response": "Rest."} for i in range(3)])
    out = tmp_path / "out"
    with FakeOpenAI() as fake:
        args = ["grade", "--data", str(rows), "--responses", str(replies), "--grader-base-url", str(fake.base_url)]
        command = [*args, "--no-progress", "--out", str(out)]
        first = CliRunner().invoke(main, command, env={"OPENAI_API_KEY": "sk-never-stored-4242"})
        assert first.exit_code == 0, first.output
        metrics = (out / "metrics.json").read_text(encoding="utf-8")
        lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
        (out / "results.jsonl").write_text("".join([lines[0], "garbage\n", *lines[1:], lines[1]]), encoding="utf-8")
        assert CliRunner().invoke(main, ["report", str(out)]).exit_code == 1
        asked = fake.requests_total
        again = CliRunner().invoke(main, command, env={"OPENAI_API_KEY": "sk-never-stored-4242"})
        assert again.exit_code == 0, again.output
        assert fake.requests_total == asked
    assert (out / "results.jsonl").read_text(encoding="utf-8").count("\n") == 3
    assert (out / "metrics.json").read_text(encoding="utf-8") == metrics
    assert CliRunner().invoke(main, ["report", str(out)]).exit_code == 0
