"""Loading rows: the official schema, and errors that name file, line and field."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from healthbench.data.loading import load_meta_rows, load_rows
from healthbench.errors import DataError
from tests.conftest import make_row, write_jsonl


def test_loads_rows_in_file_order(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [make_row("a"), make_row("b")])
    rows = load_rows(path)
    assert [r.prompt_id for r in rows] == ["a", "b"]
    assert rows[0].rubrics[1].points == -3
    assert rows[0].prompt[0].role == "user"
    assert rows[0].physician_response is None  # only HealthBench Professional rows have one


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda r: r.pop("rubrics"), "field rubrics: Field required"),
        (lambda r: r["rubrics"][1].update(points=2.0), "field rubrics.1.points"),
        (lambda r: r["rubrics"][0].update(points="5"), "field rubrics.0.points"),
        (lambda r: r["rubrics"][0].update(points=-5), "field rubrics: no item has positive points"),
        (lambda r: r["prompt"].append({"role": "assistant", "content": "x"}), "field prompt: must end on a user"),
        (lambda r: r["prompt"][0].update(role="tool"), "field prompt.0.role"),
        (lambda r: r.update(prompt=[]), "field prompt:"),
    ],
)
def test_bad_row_names_file_line_and_field(tmp_path: Path, mutate: object, expected: str) -> None:
    bad = make_row("b")
    mutate(bad)  # type: ignore[operator]
    path = write_jsonl(tmp_path / "d.jsonl", [make_row("a"), bad])
    with pytest.raises(DataError) as caught:
        load_rows(path)
    assert str(caught.value).startswith(f"{path}:2: ")
    assert expected in str(caught.value)


def test_bad_json_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(make_row("a")) + "\n\n{not json\n")
    with pytest.raises(DataError, match=r"d\.jsonl:3: invalid JSON"):
        load_rows(path)
    write_jsonl(path, [make_row("a"), make_row("b"), make_row("a")])
    with pytest.raises(DataError, match=r"d\.jsonl:3: field prompt_id: duplicate 'a', first on line 1"):
        load_rows(path)


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        load_rows(tmp_path / "absent.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="no rows"):
        load_rows(tmp_path / "empty.jsonl")


def test_meta_rows(tmp_path: Path) -> None:
    meta = {
        "prompt": [{"role": "user", "content": "hi"}],
        "completion": "hello",
        "rubric": "Greets the user",
        "category": "cluster:communication_x_y",
        "binary_labels": [True, False],
        "anonymized_physician_ids": ["a", "b"],
        "prompt_id": "p",
        "completion_id": "c",
    }
    assert load_meta_rows(write_jsonl(tmp_path / "m.jsonl", [meta, meta]))[1].binary_labels == [True, False]
    meta["anonymized_physician_ids"] = ["a"]
    with pytest.raises(DataError, match=r"m\.jsonl:1: field anonymized_physician_ids"):
        load_meta_rows(write_jsonl(tmp_path / "m.jsonl", [meta]))


def test_sample_file_facts(sample_path: Path) -> None:
    rows = load_rows(sample_path)
    assert len(rows) == 500
    assert sum(len(r.rubrics) for r in rows) == 5965
    assert statistics.median(len(r.rubrics) for r in rows) == 12
    assert sum(len(r.prompt) > 1 for r in rows) == 213
    assert sum(any(i.points < 0 for i in r.rubrics) for r in rows) == 475
    lowest = min(
        sum(i.points for i in r.rubrics if i.points < 0) / sum(i.points for i in r.rubrics if i.points > 0)
        for r in rows
    )
    assert lowest == pytest.approx(-3.29, abs=0.01)
