"""`--split` wherever tasks are chosen: `grade`/`eval`/`probe` on the official full set (whose heldout is the official
hard file, read offline from HEALTHBENCH_DATA_DIR) and on a file with a `--heldout` file; run.json, the report and
the leaderboard naming the split; a run resumed with another split refused; `serve`'s splits beside `test`; the
Inspect task's `split=`; and bad input said in one line."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pydantic import SecretStr

from healthbench.cli import main
from healthbench.data.loading import load_rows
from healthbench.data.splits import SplitName, assign_splits, why_empty
from healthbench.data.subsets import SUBSETS
from healthbench.grading.transforms import TRANSFORMS
from healthbench.integrations.openreward.deployment import Deployment, load_splits
from healthbench.reporting import leaderboard
from healthbench.runs.folder import RunFolder
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY

THEMES = ("hedging", "communication", "global_health")


def rows_of(count: int, prefix: str = "r") -> list[dict[str, Any]]:
    """Made-up rows in three themes."""
    return [make_row(f"{prefix}{n:02d}", example_tags=(f"theme:{THEMES[n % 3]}",)) for n in range(count)]


@pytest.fixture
def official(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[str, Any]], list[str]]:
    """A made-up full set of 25 rows and a hard file of 5 of them, under the official names in an offline folder."""
    folder = tmp_path / "official"
    folder.mkdir()
    rows = rows_of(25)
    hard = rows[2::5]
    write_jsonl(folder / SUBSETS["full"].filename, rows)
    write_jsonl(folder / SUBSETS["hard"].filename, hard)
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(folder))
    monkeypatch.setenv("HEALTHBENCH_ALLOW_SHA256_MISMATCH", "1")  # our own rows stand in for the official files
    return rows, [row["prompt_id"] for row in hard]


def replies(tmp_path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    return write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": r["prompt_id"], "response": "Rest."} for r in rows])


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={"HEALTHBENCH_GRADER_API_KEY": KEY, **(env or {})})


def graded_ids(out: Path) -> list[str]:
    return sorted(json.loads(line)["prompt_id"] for line in (out / "results.jsonl").read_text().splitlines())


def test_grade_the_official_heldout_and_name_it(
    tmp_path: Path, fake: FakeOpenAI, official: tuple[list[dict[str, Any]], list[str]]
) -> None:
    rows, hard = official
    assert fake.base_url
    out = tmp_path / "heldout"
    flags = ["--responses", str(replies(tmp_path, rows)), "--grader-base-url", fake.base_url, "--no-progress"]
    result = invoke("grade", "--subset", "full", "--split", "heldout", "--out", str(out), "--report", *flags)
    assert result.exit_code == 0, result.output
    assert "the heldout split of subset:full: 5 tasks" in result.stderr
    assert graded_ids(out) == sorted(hard)
    data = RunFolder(out).require_run().spec.data
    hard_file = Path(str(tmp_path / "official" / SUBSETS["hard"].filename))
    assert (data.source, data.split, data.split_seed) == ("subset:full", "heldout", 0)
    assert (data.heldout, data.heldout_sha256) == ("subset:hard", hashlib.sha256(hard_file.read_bytes()).hexdigest())
    assert '<dd id="split">heldout' in (out / "report.html").read_text()
    [entry] = leaderboard.build([out]).runs
    assert (entry.subset, entry.split) == ("full, split heldout", "heldout")

    # Validation is one of the 20 rows left (5%), train the other 19.
    result = invoke("grade", "--subset", "full", "--split", "validation", "--out", str(tmp_path / "v"), *flags)
    assert result.exit_code == 0, result.output
    [chosen] = graded_ids(tmp_path / "v")
    assert chosen not in hard

    # The same folder with another split is another run: refused, naming the difference.
    result = invoke("grade", "--subset", "full", "--split", "train", "--out", str(out), *flags)
    assert result.exit_code != 0 and "split" in result.output and "Traceback" not in result.output


def test_eval_and_probe_take_the_split_of_a_file_with_a_heldout_file(tmp_path: Path) -> None:
    rows = rows_of(40)
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    held = write_jsonl(tmp_path / "held.jsonl", [{"prompt_id": r["prompt_id"]} for r in rows[:6]])
    split = ["--data", str(data), "--heldout", str(held), "--dry-run", "--json"]
    env = {"OPENAI_API_KEY": KEY}
    sizes = {}
    for name in ("train", "validation", "heldout"):
        result = invoke("eval", "--model", "gpt-4.1", "--split", name, "--out", str(tmp_path / name), *split, env=env)
        assert result.exit_code == 0, result.output
        sizes[name] = json.loads(result.stdout)["samples"]
    # heldout the file's 6 rows; validation 5% of the 34 left (1.7, so 2); train the other 32.
    assert sizes == {"train": 32, "validation": 2, "heldout": 6}
    transform = next(iter(TRANSFORMS))
    probe = ["--responses", str(replies(tmp_path, rows)), "--transform", transform, "--out", str(tmp_path / "p")]
    result = invoke("probe", "--split", "heldout", *probe, *split)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["samples"] == 6 * 2  # each reply as it is and rewritten once


def bad(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("Error", "healthbench: error"))]
    assert len(lines) == 1, result.output
    return lines[0]


def test_bad_split_input_is_one_line(tmp_path: Path, official: tuple[list[dict[str, Any]], list[str]]) -> None:
    rows, _ = official
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    held = write_jsonl(tmp_path / "held.jsonl", [{"prompt_id": "r01"}, {"prompt_id": "elsewhere"}])
    common = ["--responses", str(replies(tmp_path, rows)), "--out", str(tmp_path / "out")]
    said = bad("grade", "--subset", "hard", "--split", "train", *common)
    assert "--split splits the full set or a --data file, not the hard subset" in said
    said = bad("grade", "--subset", "full", "--split", "train", "--heldout", str(held), *common)
    assert "--heldout goes with --data" in said
    assert "--heldout goes with --split" in bad("grade", "--data", str(data), "--heldout", str(held), *common)
    said = bad("grade", "--data", str(data), "--split", "train", "--heldout", str(held), *common)
    assert f"{held}:2: field prompt_id: heldout 'elsewhere' is not in the data being split" in said
    few = write_jsonl(tmp_path / "few.jsonl", rows_of(3))
    said = bad("grade", "--data", str(few), "--split", "validation", *common)
    assert f"{few}: its validation split is empty" in said
    said = bad("serve", "--subset", "full", "--heldout", str(held))
    assert "--heldout goes with --data" in said
    assert not (tmp_path / "out").exists()


def test_a_heldout_file_of_every_row_is_said_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before, "too few rows: 12" for data of any size whose heldout file names every row.
    rows = rows_of(12)
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    held = write_jsonl(tmp_path / "held.jsonl", [{"prompt_id": row["prompt_id"]} for row in rows])
    why = (
        "the heldout rows are all 12 rows of the data, leaving none to train on or validate with (a --heldout file "
        "names the part of the data kept out of training, not all of it)"
    )
    common = ["--data", str(data), "--heldout", str(held)]
    for split in ("train", "validation"):
        said = bad(
            "grade",
            "--split",
            split,
            *common,
            "--responses",
            str(replies(tmp_path, rows)),
            "--out",
            str(tmp_path / "g"),
        )
        assert said == f"Error: {data}: its {split} split is empty: {why}"
        said = bad("export", "--format", "trl", "--split", split, *common, "--out", str(tmp_path / "out"))
        assert said == f"Error: {data}: its {split} split is empty: {why}"
    assert not (tmp_path / "out").exists()
    # serve serves what there is and says why the rest is not served (the server itself stubbed out).
    monkeypatch.setattr("healthbench.integrations.openreward.environment.serve", lambda splits, **_: None)
    pytest.importorskip("openreward")
    served = invoke("serve", *common, "--port", "0")
    assert served.exit_code == 0, served.output
    for split in ("train", "validation"):
        assert f"healthbench: the {split} split is empty ({why}), so it is not served\n" in served.stderr


@pytest.mark.parametrize(
    ("sizes", "split", "why"),
    [
        (
            {"train": 2, "validation": 0, "heldout": 0},
            "heldout",
            "20% of 2 rows rounds to none: a seeded heldout needs 3 ",
        ),
        (
            {"train": 7, "validation": 0, "heldout": 2},
            "validation",
            "5% of the 7 rows outside heldout rounds to none: ",
        ),
        ({"train": 0, "validation": 0, "heldout": 5}, "train", "the heldout rows are all 5 rows of the data"),
    ],
)
def test_why_a_split_is_empty(sizes: dict[SplitName, int], split: SplitName, why: str) -> None:
    assert why_empty(split, sizes).startswith(why)


def test_serve_serves_the_splits_beside_test(
    tmp_path: Path, official: tuple[list[dict[str, Any]], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows, hard = official
    splits = load_splits(None, ["full", "hard"])
    assert list(splits) == ["test", "train", "validation", "heldout", "hard"]
    ids = {name: [row.prompt_id for row in part] for name, part in splits.items()}
    assert ids["test"] == [row["prompt_id"] for row in rows] and ids["heldout"] == ids["hard"] == hard
    assert (len(ids["train"]), len(ids["validation"])) == (19, 1)
    assert sorted(ids["train"] + ids["validation"] + ids["heldout"]) == sorted(ids["test"])

    pytest.importorskip("openreward")
    from healthbench.grading.settings import GraderConfig
    from healthbench.integrations.openreward.environment import HealthBench

    env_cls = HealthBench.bound(Deployment(splits, GraderConfig(api_key=SecretStr(KEY))))
    assert [(s.name, s.type) for s in env_cls.list_splits()] == [
        ("test", "test"),
        ("train", "train"),
        ("validation", "validation"),
        ("heldout", "test"),
        ("hard", "test"),
    ]

    # A file with a heldout file of its own, through the command (the server itself stubbed out).
    served: dict[str, Any] = {}
    monkeypatch.setattr(
        "healthbench.integrations.openreward.environment.serve", lambda splits, **_: served.update(splits)
    )
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    held = write_jsonl(tmp_path / "held.jsonl", rows[:3])
    result = CliRunner().invoke(main, ["serve", "--data", str(data), "--heldout", str(held), "--port", "0"])
    assert result.exit_code == 0, result.output
    assert [row.prompt_id for row in served["heldout"]] == [row["prompt_id"] for row in rows[:3]]
    expected = assign_splits(load_rows(data), heldout=load_rows(held))
    for name in ("train", "validation"):
        assert [row.prompt_id for row in served[name]] == [pid for pid, split in expected.items() if split == name]


def test_the_inspect_task_takes_a_split(
    tmp_path: Path, official: tuple[list[dict[str, Any]], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("inspect_ai")
    monkeypatch.setenv("HEALTHBENCH_GRADER_API_KEY", KEY)
    from healthbench.integrations.inspect_task import healthbench

    rows, hard = official
    task = healthbench(split="heldout")
    assert sorted(str(sample.id) for sample in task.dataset) == sorted(hard)
    assert task.metadata is not None and task.metadata["split"] == "heldout"
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    held = write_jsonl(tmp_path / "held.jsonl", rows[:4])
    task = healthbench(data=str(data), split="heldout", heldout=str(held))
    assert [str(sample.id) for sample in task.dataset] == [row["prompt_id"] for row in rows[:4]]


def test_the_verifiers_taskset_takes_a_split(tmp_path: Path) -> None:
    pytest.importorskip("verifiers.v1")
    import healthbench

    rows = rows_of(40)
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    expected = assign_splits(load_rows(data), seed=3)
    tasks = list(healthbench.load_environment(data=data, split="validation", split_seed=3).taskset)
    assert [task.data.id for task in tasks] == [pid for pid, split in expected.items() if split == "validation"]
