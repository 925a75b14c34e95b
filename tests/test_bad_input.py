"""No input ends in a traceback: every command, given bad arguments (garbage, binary or empty files, folders that are
not runs, runs whose files are garbage, output folders that cannot be made), exits non-zero with one message."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY
from tests.test_metaeval import made_up_meta_rows

ENV = {"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
UNMAKEABLE = Path("/proc/healthbench-nope")  # /proc takes no new folders, even from root


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, [str(arg) for arg in args], env=ENV | (env or {}))


def refused(result: Result, *said: str) -> str:
    """A non-zero exit with one error line (after click's usage lines, for a bad flag) and no traceback."""
    assert result.exit_code not in (0, None), result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    if not result.output.startswith("Usage:"):
        assert len(result.output.strip().splitlines()) == 1, result.output
    for words in said:
        assert words in errors[0], result.output
    return errors[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Bad files of every kind, good data and replies, and a finished graded run and meta-eval run to spoil."""
    tmp = tmp_path_factory.mktemp("bad")
    ideal = {"ideal_completion": "Rest.", "ideal_completions_group": "Group 1", "ideal_completions_ref_completions": []}
    rows = [make_row(f"t{i}", ideal=ideal) for i in range(3)]
    made = {
        "data": write_jsonl(tmp / "rows.jsonl", rows),
        "replies": write_jsonl(
            tmp / "replies.jsonl", [{"prompt_id": r["prompt_id"], "response": "Rest."} for r in rows]
        ),
        "meta": write_jsonl(tmp / "meta.jsonl", made_up_meta_rows(8)),
        "garbage": tmp / "garbage.jsonl",
        "binary": tmp / "binary.jsonl",
        "empty": tmp / "empty.jsonl",
        "folder": tmp / "not-a-run",
    }
    made["garbage"].write_text("garbage\n")
    made["binary"].write_bytes(b"\xff\xfe\x00binary")
    made["empty"].write_text("")
    made["folder"].mkdir()
    with FakeOpenAI() as fake:
        grader = ("--grader-base-url", fake.base_url or "", "--no-progress")
        graded = invoke("grade", "--data", made["data"], "--responses", made["replies"], "--out", tmp / "run", *grader)
        assert graded.exit_code == 0, graded.output
        meta = invoke("meta-eval", "--data", made["meta"], "--out", tmp / "meta-run", *grader)
        assert meta.exit_code == 0, meta.output
    made["run"], made["meta-run"] = tmp / "run", tmp / "meta-run"
    return made


def spoiled(files: dict[str, Path], tmp_path: Path, name: str, spoil: Callable[[Path], Any]) -> Path:
    """A copy of the finished run `name`, spoiled."""
    copy = tmp_path / f"spoiled-{name}-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(files[name], copy)
    spoil(copy)
    return copy


def writing(name: str, text: str) -> Callable[[Path], None]:
    def spoil(run: Path) -> None:
        (run / name).write_text(text)

    return spoil


def rewrite_results(change: Callable[[list[dict[str, Any]]], Any]) -> Callable[[Path], None]:
    def spoil(run: Path) -> None:
        records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
        change(records)
        write_jsonl(run / "results.jsonl", records)

    return spoil


@pytest.mark.parametrize(
    ("kind", "said"),
    [("garbage", "invalid JSON"), ("binary", "not UTF-8"), ("empty", "no rows"), ("meta", "not a HealthBench")],
)
def test_grading_commands_refuse_data_that_is_not_data(
    files: dict[str, Path], tmp_path: Path, kind: str, said: str
) -> None:
    data = files[kind]
    refused(invoke("grade", "--data", data, "--responses", files["replies"], "--out", tmp_path / "g"), str(data))
    refused(invoke("eval", "--model", "m", "--data", data, "--out", tmp_path / "e"), str(data))
    refused(invoke("baseline", "--group", "1", "--data", data, "--out", tmp_path / "b"), str(data))
    refused(invoke("serve", "--data", data, "--port", "0"), str(data))
    assert not (tmp_path / "g").exists() and not (tmp_path / "e").exists()
    if kind != "meta":
        refused(invoke("meta-eval", "--data", data, "--out", tmp_path / "m"), str(data))


def test_replies_and_prices_that_are_not_them_are_named(files: dict[str, Path], tmp_path: Path) -> None:
    for kind in ("garbage", "binary", "empty", "data"):
        refused(invoke("grade", "--data", files["data"], "--responses", files[kind], "--out", tmp_path / "g"))
    args = ("grade", "--data", files["data"], "--responses", files["replies"], "--out", tmp_path / "g")
    refused(invoke(*args, "--prices", files["garbage"]), "cannot read prices")
    refused(invoke(*args, "--data", files["folder"]))  # click's own check: a folder is no file
    refused(invoke("meta-eval", "--data", files["data"], "--out", tmp_path / "m"), "not a meta-evaluation file")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no folder can be made")
def test_an_output_folder_that_cannot_be_made_is_named(files: dict[str, Path], tmp_path: Path) -> None:
    said = f"cannot write {UNMAKEABLE}"
    refused(invoke("grade", "--data", files["data"], "--responses", files["replies"], "--out", UNMAKEABLE), said)
    refused(invoke("eval", "--model", "m", "--data", files["data"], "--out", UNMAKEABLE), said)
    refused(invoke("baseline", "--group", "1", "--data", files["data"], "--out", UNMAKEABLE), said)
    refused(invoke("meta-eval", "--data", files["meta"], "--out", UNMAKEABLE), said)
    refused(invoke("leaderboard", files["run"], "--out", UNMAKEABLE / "board.html"), f"{said}/board.html")


def test_an_output_folder_holding_other_things_is_named(files: dict[str, Path], tmp_path: Path) -> None:
    args = ("grade", "--data", files["data"], "--responses", files["replies"], "--no-progress", "--out")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "progress.sqlite").write_text("not a database")
    refused(invoke(*args, junk), f"cannot write {junk / 'progress.sqlite'}", "not a run's store")
    refused(invoke("batches", junk), "not a run's store")
    holed = tmp_path / "holed"
    (holed / "progress.sqlite").mkdir(parents=True)
    refused(invoke(*args, holed), f"cannot write {holed / 'progress.sqlite'}")
    refused(invoke(*args, files["data"]))  # a file where the folder should be: click's own check


def test_folders_that_are_not_runs_are_named(files: dict[str, Path]) -> None:
    folder = files["folder"]
    refused(invoke("report", folder), str(folder))
    refused(invoke("compare", files["run"], folder), str(folder))
    refused(invoke("leaderboard", folder), str(folder))
    refused(invoke("batches", folder), str(folder))
    refused(invoke("report", folder / "absent"))  # click's own check
    refused(invoke("download", "no-such-subset"))


def test_runs_whose_files_are_garbage_are_named(files: dict[str, Path], tmp_path: Path) -> None:
    def drop_prompt_id(records: list[dict[str, Any]]) -> None:
        del records[1]["prompt_id"]

    def text_score(records: list[dict[str, Any]]) -> None:
        records[0]["score"] = "high"

    def no_metrics(records: list[dict[str, Any]]) -> None:
        records[2]["metrics"] = None

    cases = {
        "no prompt_id": (rewrite_results(drop_prompt_id), "line 2: field prompt_id: Field required"),
        "text score": (rewrite_results(text_score), "line 1: field score: Input should be a valid number"),
        "no metrics": (rewrite_results(no_metrics), "line 3: field metrics: Input should be an object"),
        "objects": (
            lambda run: write_jsonl(run / "results.jsonl", [{"x": 1}, [1, 2]]),
            "line 1: field prompt_id: Field required",
        ),
    }
    for spoil, said in cases.values():
        run = spoiled(files, tmp_path, "run", spoil)
        refused(invoke("report", run), f"{run / 'results.jsonl'}: {said}")
        refused(invoke("compare", files["run"], run), f"{run / 'results.jsonl'}: {said}")
        shutil.rmtree(run)

    def bad_adjustment(run: Path) -> None:
        recorded = json.loads((run / "run.json").read_text())
        recorded["spec"]["length_adjustment"] = {"center": "x"}
        (run / "run.json").write_text(json.dumps(recorded))

    run = spoiled(files, tmp_path, "run", bad_adjustment)
    refused(invoke("report", run), f"{run / 'run.json'}: field spec.length_adjustment.center")
    refused(invoke("compare", files["run"], run), "run.json: field spec.length_adjustment.center")
    for name in ("run.json", "metrics.json"):
        for text, said in (("[1, 2", "not valid JSON"), ("[1, 2]", "expected a JSON object")):
            broken = spoiled(files, tmp_path, "run", writing(name, text))
            refused(invoke("leaderboard", broken), f"{broken / name}: {said}")
            shutil.rmtree(broken)
    refused(invoke("report", spoiled(files, tmp_path, "run", lambda run: (run / "run.json").write_text("{"))))


def test_meta_eval_runs_are_refused_where_they_do_not_belong_and_checked_where_they_do(
    files: dict[str, Path], tmp_path: Path
) -> None:
    meta = files["meta-run"]
    refused(invoke("compare", files["run"], meta), f"{meta}: a meta-eval run grades the grader")
    refused(invoke("compare", meta, files["run"]), f"{meta}: a meta-eval run grades the grader")
    refused(invoke("leaderboard", meta), str(meta))

    def labels_as_text(records: list[dict[str, Any]]) -> None:
        records[3]["binary_labels"] = "yes"

    run = spoiled(files, tmp_path, "meta-run", rewrite_results(labels_as_text))
    refused(
        invoke("report", run), f"{run / 'results.jsonl'}: line 4: field binary_labels: Input should be a valid array"
    )


def run_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "healthbench", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **ENV}, timeout=120)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no folder can be made")
def test_real_exits_of_the_two_tracebacks_the_issue_found(files: dict[str, Path]) -> None:
    made = run_process("grade", "--data", files["data"], "--responses", files["replies"], "--out", UNMAKEABLE)
    assert made.returncode == 1 and made.stdout == ""
    assert made.stderr.splitlines() == [f"Error: cannot write {UNMAKEABLE}: No such file or directory"]
    compared = run_process("compare", files["run"], files["meta-run"])
    assert compared.returncode == 1 and compared.stdout == "" and len(compared.stderr.splitlines()) == 1
    assert "a meta-eval run grades the grader" in compared.stderr and "Traceback" not in compared.stderr
