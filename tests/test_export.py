"""`healthbench export`: each trainer's format holds every task of the split with its prompt_id and conversation and
nothing of its rubric, the same bytes every time; verl's parquet (read with pyarrow, the `train` extra) has the
columns and `extra_info` the reward side reads; bad input is one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.data.loading import load_rows
from healthbench.data.source import TaskSource
from healthbench.data.splits import SPLITS, split_rows
from healthbench.data.subsets import SUBSETS
from tests.conftest import make_row, write_jsonl

THEMES = ("hedging", "communication", "global_health")


def rows_of(count: int) -> list[dict[str, Any]]:
    """Made-up rows, each with criteria of its own (so a leak names its row) and a two-turn conversation."""
    return [
        make_row(
            f"r{n:02d}",
            prompt=(("user", f"Question {n}?"), ("assistant", "Tell me more."), ("user", f"Details {n}, ünïcode.")),
            rubrics=((5, f"CRITERION-{n}-A mentions rest", ("axis:completeness",)), (-2, f"CRITERION-{n}-B", ())),
            example_tags=(f"theme:{THEMES[n % 3]}",),
        )
        for n in range(40)
    ]


def export(*args: str) -> Result:
    return CliRunner().invoke(main, ["export", *args])


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "rows.jsonl", rows_of(40))


def written(out: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(out.iterdir()))


@pytest.mark.parametrize("form", ["trl", "openrlhf"])
def test_jsonl_formats(tmp_path: Path, data: Path, form: str) -> None:
    args = ["--format", form, "--data", str(data), "--split", "train", "--split", "heldout"]
    result = export(*args, "--out", str(tmp_path / "a"))
    assert result.exit_code == 0, result.output
    assert export(*args, "--out", str(tmp_path / "b")).exit_code == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["heldout.jsonl", "train.jsonl"]
    assert written(tmp_path / "a") == written(tmp_path / "b")
    assert b"CRITERION" not in written(tmp_path / "a") and b"rubric" not in written(tmp_path / "a")
    rows = load_rows(data)
    for split in ("train", "heldout"):
        lines = [json.loads(line) for line in (tmp_path / "a" / f"{split}.jsonl").read_text("utf-8").splitlines()]
        expected = split_rows(rows, split)
        assert f"{split}: {len(expected)} tasks" in result.output
        assert [line["prompt_id"] for line in lines] == [row.prompt_id for row in expected]
        # The conversation as `eval` sends it: the row's messages verbatim.
        messages = [[message.model_dump() for message in row.prompt] for row in expected]
        if form == "trl":
            assert [set(line) for line in lines] == [{"prompt", "prompt_id"}] * len(lines)
            assert [line["prompt"] for line in lines] == messages
        else:
            assert [line["prompt"] for line in lines] == messages
            assert [line["label"] for line in lines] == [line["prompt_id"] for line in lines]


def test_verl_parquet(tmp_path: Path, data: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    held = write_jsonl(tmp_path / "held.jsonl", rows_of(40)[:8])
    args = ["--format", "verl", "--data", str(data), "--heldout", str(held), "--seed", "4"]
    for split in SPLITS:
        args += ["--split", split]
    result = export(*args, "--out", str(tmp_path / "a"))
    assert result.exit_code == 0, result.output
    assert export(*args, "--out", str(tmp_path / "b")).exit_code == 0
    assert written(tmp_path / "a") == written(tmp_path / "b")
    rows = load_rows(data)
    seen: list[str] = []
    for split in SPLITS:
        table = pq.read_table(tmp_path / "a" / f"{split}.parquet")
        assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        records = table.to_pylist()
        expected = split_rows(rows, split, heldout=load_rows(held), seed=4)
        assert len(records) == len(expected) > 0
        for index, (record, row) in enumerate(zip(records, expected, strict=True)):
            assert record["data_source"] == "healthbench" and record["ability"] == "medical"
            assert record["prompt"] == [message.model_dump() for message in row.prompt]
            assert record["reward_model"] == {"style": "rule", "ground_truth": row.prompt_id}
            assert record["extra_info"] == {
                "split": split,
                "index": index,
                "prompt_id": row.prompt_id,
                "data": str(data.resolve()),
                "heldout": str(held.resolve()),
                "seed": 4,
            }
        assert "CRITERION" not in json.dumps(records)
        seen += [record["reward_model"]["ground_truth"] for record in records]
        # What the reward side does: the split's rows found again from a row's extra_info alone.
        info = records[0]["extra_info"]
        found = TaskSource.given(info["data"]).splitting(info["split"], info["heldout"], info["seed"]).rows()
        assert [row.prompt_id for row in found] == [record["reward_model"]["ground_truth"] for record in records]
    # The three splits are disjoint and cover the data.
    assert sorted(seen) == sorted(row.prompt_id for row in rows)


def test_verl_of_the_official_set_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rows = rows_of(40)
    write_jsonl(tmp_path / SUBSETS["full"].filename, rows)
    write_jsonl(tmp_path / SUBSETS["hard"].filename, rows[::4])
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HEALTHBENCH_ALLOW_SHA256_MISMATCH", "1")  # our own rows stand in for the official files
    result = export("--format", "verl", "--split", "heldout", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    records = pq.read_table(tmp_path / "out" / "heldout.parquet").to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in records] == [row["prompt_id"] for row in rows[::4]]
    assert {(r["extra_info"]["data"], r["extra_info"]["heldout"]) for r in records} == {("full", None)}
    found = TaskSource.given("full").splitting("heldout", None, records[0]["extra_info"]["seed"]).rows()
    assert [row.prompt_id for row in found] == [row["prompt_id"] for row in rows[::4]]


def test_bad_input_is_one_line(tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def said(*args: str) -> str:
        result = export(*args, "--out", str(tmp_path / "out"))
        assert result.exit_code != 0 and "Traceback" not in result.output, result.output
        [line] = [line for line in result.output.splitlines() if line.startswith("Error")]
        return line

    assert "'yaml' is not one of 'trl', 'verl', 'openrlhf'" in said("--format", "yaml", "--split", "train")
    assert "not the hard subset" in said("--format", "trl", "--subset", "hard", "--split", "train")
    assert "--heldout goes with --data" in said("--format", "trl", "--split", "train", "--heldout", str(data))
    few = write_jsonl(tmp_path / "few.jsonl", [make_row("a"), make_row("b")])
    assert f"{few}: its heldout split is empty: 20% of 2 rows rounds to none" in said(
        "--format", "trl", "--data", str(few), "--split", "heldout"
    )
    # Without pyarrow, verl's parquet names the extra that installs it.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    line = said("--format", "verl", "--data", str(data), "--split", "train")
    assert line == (
        "Error: verl's parquet needs the package's train extra, and pyarrow is not installed: pip install -e "
        "'.[train]' in the clone"
    )
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
