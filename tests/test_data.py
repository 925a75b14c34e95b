"""Loading rows: the official schema, and errors that name file, line and field."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthbench.cli import main
from healthbench.data.loading import load_meta_rows, load_rows
from healthbench.data.responses import load_responses
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


META_ROW = {
    "prompt": [{"role": "user", "content": "hi"}],
    "completion": "hello",
    "rubric": "Greets the user",
    "category": "cluster:communication_x_y",
    "binary_labels": [True, False],
    "anonymized_physician_ids": ["a", "b"],
    "prompt_id": "p",
    "completion_id": "c",
}


def test_meta_rows(tmp_path: Path) -> None:
    meta = dict(META_ROW)
    assert load_meta_rows(write_jsonl(tmp_path / "m.jsonl", [meta, meta]))[1].binary_labels == [True, False]
    meta["anonymized_physician_ids"] = ["a"]
    with pytest.raises(DataError, match=r"m\.jsonl:1: field anonymized_physician_ids"):
        load_meta_rows(write_jsonl(tmp_path / "m.jsonl", [meta]))


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    # As some Windows editors save UTF-8: the mark before the first row is not part of it.
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(b"\xef\xbb\xbf" + (json.dumps(make_row("a")) + "\n" + json.dumps(make_row("b")) + "\n").encode())
    assert [r.prompt_id for r in load_rows(rows)] == ["a", "b"]
    meta = tmp_path / "meta.jsonl"
    meta.write_bytes(b"\xef\xbb\xbf" + (json.dumps(META_ROW) + "\n").encode())
    assert load_meta_rows(meta)[0].completion == "hello"
    replies = tmp_path / "replies.jsonl"
    replies.write_bytes(b"\xef\xbb\xbf" + json.dumps({"prompt_id": "a", "response": "Rest."}).encode() + b"\n")
    assert load_responses(replies, {"a"}) == {"a": "Rest."}
    # Only at the start: a mark inside a line is still a character of it.
    replies.write_bytes(b'\xef\xbb\xbf{"prompt_id": "a", "response": "Rest."}\n\xef\xbb\xbf{"prompt_id": "b"}\n')
    with pytest.raises(DataError, match=r"replies\.jsonl:2: invalid JSON"):
        load_responses(replies, {"a", "b"})


def test_a_file_of_the_other_kind_is_named_as_such(tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_row("a")])
    with pytest.raises(DataError) as caught:
        load_meta_rows(tasks)
    assert str(caught.value) == (
        f"{tasks}: a HealthBench task file (told from its first row), not a meta-evaluation file; grade, eval or "
        "baseline takes it"
    )
    meta = write_jsonl(tmp_path / "meta.jsonl", [META_ROW])
    with pytest.raises(DataError) as caught:
        load_rows(meta)
    assert str(caught.value) == (
        f"{meta}: a HealthBench meta-evaluation file (told from its first row), not a HealthBench task file; "
        "meta-eval takes it"
    )
    # A later row of the other kind names its line.
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [META_ROW, make_row("a")])
    with pytest.raises(DataError, match=r"mixed\.jsonl:2: a HealthBench row in a HealthBench meta-evaluation file"):
        load_meta_rows(mixed)


def test_commands_given_the_other_kind_of_file_say_so(tmp_path: Path) -> None:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_row("a")])
    meta = write_jsonl(tmp_path / "meta.jsonl", [META_ROW])
    replies = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": "a", "response": "Rest."}])
    out = ["--out", str(tmp_path / "out"), "--dry-run"]
    wrong = CliRunner().invoke(main, ["meta-eval", "--data", str(tasks), *out])
    assert wrong.exit_code == 1 and "not a meta-evaluation file" in wrong.output and "Traceback" not in wrong.output
    for command in (["grade", "--responses", str(replies)], ["eval", "--model", "m"]):
        wrong = CliRunner().invoke(main, [*command, "--data", str(meta), *out])
        assert wrong.exit_code == 1 and "not a HealthBench task file; meta-eval takes it" in wrong.output


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
