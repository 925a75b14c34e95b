"""`healthbench export`'s files as the trainers' own loaders read them: Hugging Face `datasets` (what TRL and
OpenRLHF load a JSONL dataset with, and verl its parquet) gives each row's chat messages and prompt_id back.

Runs where datasets is installed (`.venv-clients`, made by `scripts/dev test`; pyarrow comes with it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from healthbench.cli import main
from healthbench.data.loading import load_rows
from healthbench.data.splits import split_rows
from tests.conftest import make_row, write_jsonl

datasets = pytest.importorskip("datasets")


@pytest.mark.parametrize(("form", "suffix", "label"), [("trl", "jsonl", "prompt_id"), ("openrlhf", "jsonl", "label")])
def test_datasets_loads_the_jsonl_formats(tmp_path: Path, form: str, suffix: str, label: str) -> None:
    rows = [make_row(f"r{n}", prompt=(("system", "Be brief."), ("user", f"Q{n}?"))) for n in range(30)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["export", "--format", form, "--data", str(data), "--split", "train", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    loaded = datasets.load_dataset("json", data_files=str(out / f"train.{suffix}"), split="train")
    expected = split_rows(load_rows(data), "train")
    assert loaded[label] == [row.prompt_id for row in expected]
    assert loaded["prompt"] == [[m.model_dump() for m in row.prompt] for row in expected]


def test_datasets_loads_the_verl_parquet(tmp_path: Path) -> None:
    rows = [make_row(f"r{n}") for n in range(30)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["export", "--format", "verl", "--data", str(data), "--split", "validation", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    loaded = datasets.load_dataset("parquet", data_files=str(out / "validation.parquet"), split="train")
    assert loaded.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    expected = split_rows(load_rows(data), "validation")
    assert [r["ground_truth"] for r in loaded["reward_model"]] == [row.prompt_id for row in expected]
    assert [info["prompt_id"] for info in loaded["extra_info"]] == [row.prompt_id for row in expected]


def test_datasets_loads_an_export_folder_past_its_manifest(tmp_path: Path) -> None:
    # OpenRLHF's --data.prompt_dataset DIR is `datasets.load_dataset(DIR)`: with no file named for a split it reads
    # every data file as train, so the manifest, a JSON file, must not be one of them (it is hidden).
    rows = [make_row(f"r{n}", prompt=(("user", f"Q{n}?"),)) for n in range(30)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["export", "--format", "openrlhf", "--data", str(data), "--split", "heldout", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in out.iterdir()) == [".healthbench-export.json", "heldout.jsonl"]
    loaded = datasets.load_dataset(str(out))
    assert list(loaded) == ["train"]
    assert loaded["train"]["label"] == [row.prompt_id for row in split_rows(load_rows(data), "heldout")]
