"""`healthbench export`: each trainer's format holds every task of the split with its prompt_id and conversation and
nothing of its rubric, the same bytes every time; verl's parquet (read with pyarrow, the `train` extra) has the
columns and `extra_info` the reward side reads; bad input is one line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.data.loading import load_rows
from healthbench.data.source import TaskSource
from healthbench.data.splits import SPLITS, assign_splits, split_rows
from healthbench.data.subsets import SUBSETS
from healthbench.errors import ExportMismatch, OutputError
from healthbench.integrations.export import export_splits
from healthbench.runs.exports import MANIFEST, ExportOrigin, read_manifest
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY
from tests.serving import graded_by_cli

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
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [MANIFEST, "heldout.jsonl", "train.jsonl"]
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


def ids_in(path: Path) -> list[str]:
    return [json.loads(line)["prompt_id"] for line in path.read_text("utf-8").splitlines()]


def test_an_export_of_another_seed_into_the_folder_is_refused_naming_it(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "out"
    first = export("--format", "trl", "--data", str(data), "--split", "train", "--out", str(out))
    assert first.exit_code == 0, first.output
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    # The input: the same folder, another --seed. Before, heldout.jsonl was written and shared tasks with
    # train.jsonl.
    mixed = export("--format", "trl", "--data", str(data), "--split", "heldout", "--seed", "1", "--out", str(out))
    assert mixed.exit_code == 1 and "Traceback" not in mixed.output
    assert mixed.output == (
        f"Error: {out} holds an export of other splits (--seed 0 there, 1 here); adding to it would put tasks of one "
        "split beside another's. Export into a new --out folder, or with the settings it was made with.\n"
    )
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before  # nothing written
    # The same settings add to it, and its splits stay apart.
    added = export("--format", "trl", "--data", str(data), "--split", "heldout", "--out", str(out))
    assert added.exit_code == 0, added.output
    assert not set(ids_in(out / "train.jsonl")) & set(ids_in(out / "heldout.jsonl"))
    assert f"manifest (data, heldout, seed, files) -> {out / MANIFEST}" in added.output
    # The same command again is the same export.
    again = export("--format", "trl", "--data", str(data), "--split", "heldout", "--out", str(out))
    assert again.exit_code == 0 and again.output == added.output


def test_data_changed_since_the_export_is_named(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows_of(40))
    out = tmp_path / "out"
    assert export("--format", "trl", "--data", str(data), "--split", "train", "--out", str(out)).exit_code == 0
    there = hashlib.sha256(data.read_bytes()).hexdigest()[:12]
    write_jsonl(data, rows_of(40)[:35])
    here = hashlib.sha256(data.read_bytes()).hexdigest()[:12]
    said = export("--format", "trl", "--data", str(data), "--split", "heldout", "--out", str(out))
    assert said.exit_code == 1
    assert f"(--data {data.resolve()} changed since (sha256 {there} there, {here} here))" in said.output


def test_other_data_or_heldout_rows_are_named(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "out"
    held = write_jsonl(tmp_path / "held.jsonl", rows_of(40)[:8])
    assert export("--format", "trl", "--data", str(data), "--split", "train", "--out", str(out)).exit_code == 0
    other = write_jsonl(tmp_path / "other.jsonl", rows_of(40)[:30])
    said = export("--format", "trl", "--data", str(other), "--split", "validation", "--out", str(out)).output
    assert f"(--data {data.resolve()} (sha256 " in said and f"there, {other.resolve()} (sha256 " in said
    held_out = export(
        "--format", "trl", "--data", str(data), "--heldout", str(held), "--split", "train", "--out", str(out)
    )
    assert "(--heldout none (a seeded share of the data) there, " in held_out.output
    assert f"{held.resolve()} (sha256 " in held_out.output and held_out.exit_code == 1
    # The same rows from another path are the same data: a file moved is no difference.
    moved = write_jsonl(tmp_path / "moved.jsonl", rows_of(40))
    again = export("--format", "openrlhf", "--data", str(moved), "--split", "validation", "--out", str(out))
    assert again.exit_code == 0, again.output


def test_the_manifest_names_the_data_the_heldout_the_seed_and_each_file(tmp_path: Path, data: Path) -> None:
    held = write_jsonl(tmp_path / "held.jsonl", rows_of(40)[:8])
    out = tmp_path / "out"
    common = ["--data", str(data), "--heldout", str(held), "--seed", "3", "--out", str(out)]
    assert export("--format", "trl", "--split", "train", *common).exit_code == 0
    assert export("--format", "openrlhf", "--split", "heldout", *common).exit_code == 0
    manifest = read_manifest(out)
    assert manifest is not None and manifest.version == 1
    assert manifest.origin == ExportOrigin(
        data=str(data.resolve()),
        data_sha256=hashlib.sha256(data.read_bytes()).hexdigest(),
        heldout=str(held.resolve()),
        heldout_sha256=hashlib.sha256(held.read_bytes()).hexdigest(),
        seed=3,
    )
    parts = TaskSource.file(data).splitting(None, held, 3).splits(load_rows(data))
    assert (
        manifest.sizes
        == {split: len(rows) for split, rows in parts.items()}
        == {
            "train": 30,
            "validation": 2,
            "heldout": 8,
        }
    )
    assert [(f.name, f.split, f.format, f.tasks) for f in manifest.files] == [
        ("heldout.jsonl", "heldout", "openrlhf", 8),
        ("train.jsonl", "train", "trl", 30),
    ]
    for entry in manifest.files:
        assert entry.sha256 == hashlib.sha256((out / entry.name).read_bytes()).hexdigest()
    # A manifest this release does not read is refused by name, before anything is written.
    (out / MANIFEST).write_text(json.dumps({**manifest.model_dump(mode="json"), "version": 2}), "utf-8")
    said = export("--format", "trl", "--split", "validation", *common)
    assert (
        said.exit_code == 1 and f"{out / MANIFEST}: field version: .healthbench-export.json of version 2" in said.output
    )
    (out / MANIFEST).write_text("{", "utf-8")
    said = export("--format", "trl", "--split", "validation", *common)
    assert said.exit_code == 1 and f"Error: {out / MANIFEST}: not valid JSON (" in said.output
    assert not (out / "validation.jsonl").exists()


def test_a_folder_exported_before_manifests_is_taken_when_its_files_agree(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "out"
    for form, split in (("trl", "train"), ("openrlhf", "validation")):
        assert export("--format", form, "--data", str(data), "--split", split, "--out", str(out)).exit_code == 0
    (out / MANIFEST).unlink()  # as the releases before manifests left it
    added = export("--format", "trl", "--data", str(data), "--split", "heldout", "--out", str(out))
    assert added.exit_code == 0, added.output
    manifest = read_manifest(out)
    assert manifest is not None
    assert [(f.name, f.format) for f in manifest.files] == [
        ("heldout.jsonl", "trl"),
        ("train.jsonl", "trl"),
        ("validation.jsonl", "openrlhf"),
    ]


def test_a_folder_exported_before_manifests_of_other_splits_is_refused(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "out"
    assert export("--format", "trl", "--data", str(data), "--split", "train", "--out", str(out)).exit_code == 0
    (out / MANIFEST).unlink()
    mixed = export("--format", "trl", "--data", str(data), "--split", "heldout", "--seed", "1", "--out", str(out))
    assert mixed.exit_code == 1
    assigned = assign_splits(load_rows(data), seed=1)
    moved = Counter(assigned[prompt_id] for prompt_id in ids_in(out / "train.jsonl") if assigned[prompt_id] != "train")
    said = ", ".join(f"{moved[split]} in {split}" for split in SPLITS if moved[split])
    assert (
        f"train.jsonl holds {sum(moved.values())} tasks these splits put elsewhere ({said}): it was split from other "
        "--data, --heldout rows or --seed" in mixed.output
    )
    assert sorted(path.name for path in out.iterdir()) == ["train.jsonl"]
    # A file of an export's name that no export wrote is named with its line and field.
    (out / "train.jsonl").write_text('{"question": "?"}\n', "utf-8")
    foreign = export("--format", "trl", "--data", str(data), "--split", "heldout", "--out", str(out))
    assert foreign.exit_code == 1
    assert f"{out / 'train.jsonl'}:1: field prompt_id: Field required (not a file `export` writes" in foreign.output


def test_the_sample_exported_with_two_seeds_never_mixes(tmp_path: Path, sample_path: Path) -> None:
    # The run: train with --seed 0, then heldout with --seed 1, into one folder (77 of the 100 heldout tasks
    # were in train). A folder of the seed-0 export from before manifests is refused as well.
    out = tmp_path / "out"
    args = ["--format", "trl", "--data", str(sample_path), "--out", str(out)]
    assert export(*args, "--split", "train").exit_code == 0
    for manifest in (True, False):
        if not manifest:
            (out / MANIFEST).unlink()
        mixed = export(*args, "--split", "heldout", "--seed", "1")
        assert mixed.exit_code == 1 and not (out / "heldout.jsonl").exists(), mixed.output
    assert "77 in heldout" in mixed.output


def test_a_refused_folder_is_left_as_it_was_by_the_library(tmp_path: Path, data: Path) -> None:
    rows = load_rows(data)
    source = TaskSource.file(data).splitting(None, None, 0)
    parts = source.splits(rows)
    out = tmp_path / "out"
    written = export_splits(parts, ["validation", "train"], "trl", out, source)
    assert list(written) == ["validation", "train"]
    other = TaskSource.file(data).splitting(None, None, 5)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    with pytest.raises(ExportMismatch, match=r"`split_seed` 0 there, 5 here") as caught:
        export_splits(other.splits(rows), ["heldout"], "trl", out, other)
    assert isinstance(caught.value, OutputError) and caught.value.path == out
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_a_verl_folder_exported_before_manifests_is_read_for_its_tasks(tmp_path: Path, data: Path) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "out"
    assert export("--format", "verl", "--data", str(data), "--split", "train", "--out", str(out)).exit_code == 0
    (out / MANIFEST).unlink()
    added = export("--format", "verl", "--data", str(data), "--split", "heldout", "--out", str(out))
    assert added.exit_code == 0, added.output
    manifest = read_manifest(out)
    assert manifest is not None and [(f.name, f.format) for f in manifest.files] == [
        ("heldout.parquet", "verl"),
        ("train.parquet", "verl"),
    ]
    (out / MANIFEST).unlink()
    mixed = export("--format", "verl", "--data", str(data), "--split", "validation", "--seed", "2", "--out", str(out))
    assert mixed.exit_code == 1 and "(train.parquet holds " in mixed.output, mixed.output
    (out / "train.parquet").write_bytes(b"not parquet")
    broken = export("--format", "verl", "--data", str(data), "--split", "validation", "--out", str(out))
    assert broken.exit_code == 1 and "Traceback" not in broken.output
    assert broken.output.startswith(f"Error: {out / 'train.parquet'}: Could not open Parquet input source")
    assert "(not a file `export` writes: move it out of the folder, or export into a new --out folder)" in broken.output


# A machine with the train extra and nothing more: pandas cannot be imported, whatever this venv holds.
NO_PANDAS = """import sys


class NoPandas:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoPandas())
"""


def test_the_documented_verl_check_runs_with_the_train_extra_alone(tmp_path: Path, data: Path) -> None:
    # docs/training.md's check of the reward file, before any GPU is spent, as written: it read the parquet with
    # pandas, which the train extra does not bring (ModuleNotFoundError where only the extra is installed).
    pq = pytest.importorskip("pyarrow.parquet")
    doc = (Path(__file__).parents[1] / "docs" / "training.md").read_text(encoding="utf-8")
    [check] = re.findall(r"python - <<'PY'\n(.*?\n)PY\n", doc, flags=re.DOTALL)
    assert "healthbench export --format verl --split train --split validation --out data/verl" in doc
    out = tmp_path / "data" / "verl"
    assert export("--format", "verl", "--data", str(data), "--split", "train", "--out", str(out)).exit_code == 0
    with FakeOpenAI() as fake:
        assert fake.base_url
        env = {**os.environ, "HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_GRADER_BASE_URL": fake.base_url}
        code = NO_PANDAS + check
        done = subprocess.run(
            [sys.executable, "-"], input=code, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        prompt_id = pq.read_table(out / "train.parquet").to_pylist()[0]["reward_model"]["ground_truth"]
        graded = graded_by_cli(tmp_path, data, {prompt_id: "Rest and fluids."}, fake.base_url)
    assert float(done.stdout) == pytest.approx(graded[prompt_id]["score"], abs=1e-9)
