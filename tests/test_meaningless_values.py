"""Values that mean nothing are refused in one line before anything is sent: empty paths and model names, rows
with an empty prompt id or criterion (naming file, line and field), prices that are negative or not finite; no
JSON file is ever written with `Infinity` or `NaN` in it; a data file that is not UTF-8 is named with its line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.errors import OutputUnusable
from healthbench.files import write_json
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY

ENV = {"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY}


def run_eval(data: Path, out: str, url: str, *extra: str, model: str = "fake-model") -> Result:
    args = ["eval", "--model", model, "--base-url", url, "--grader-base-url", url, "--data", str(data)]
    return CliRunner().invoke(main, [*args, "--out", out, "--no-progress", *extra], env=ENV)


def last_line(result: Result) -> str:
    return result.output.strip().splitlines()[-1]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "rows.jsonl", [make_row("t1"), make_row("t2")])


def test_an_empty_out_is_refused_and_nothing_is_written_here(
    tmp_path: Path, data: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    result = run_eval(data, "", fake.base_url or "")
    assert result.exit_code == 2
    assert (
        last_line(result) == """Error: Invalid value for '--out': is empty: name a path ("." for the current folder)"""
    )
    assert fake.requests_total == 0 and list(here.iterdir()) == []
    board = CliRunner().invoke(main, ["leaderboard", str(here), "--out", " "])
    assert board.exit_code == 2 and "Invalid value for '--out': is empty" in board.output


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"model": ""}, "Error: --model is empty: name one"),
        (
            {"extra": ("--grader-model", "")},
            "Error: --grader-model is empty: name one, or leave it unset for the default",
        ),
        (
            {"extra": ("--grader-model", "  ")},
            "Error: --grader-model is empty: name one, or leave it unset for the default",
        ),
    ],
)
def test_an_empty_model_name_is_refused_before_any_call(
    tmp_path: Path, data: Path, fake: FakeOpenAI, given: dict[str, object], said: str
) -> None:
    extra = given.get("extra", ())
    assert isinstance(extra, tuple)
    model = given.get("model", "fake-model")
    assert isinstance(model, str)
    result = run_eval(data, str(tmp_path / "out"), fake.base_url or "", *extra, model=model)
    assert result.exit_code == 2, result.output
    assert last_line(result) == said
    assert fake.requests_total == 0 and not (tmp_path / "out").exists()


def test_an_empty_base_url_is_refused(tmp_path: Path, data: Path, fake: FakeOpenAI) -> None:
    args = ["eval", "--model", "m", "--base-url", "", "--grader-base-url", fake.base_url or "", "--data", str(data)]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out")], env=ENV)
    assert result.exit_code == 2 and last_line(result) == "Error: --base-url is empty: name one"
    assert fake.requests_total == 0


@pytest.mark.parametrize(
    ("row", "line", "field"),
    [
        (make_row(""), 2, "prompt_id: is empty: a task needs an id"),
        (make_row("   "), 2, "prompt_id: is empty: a task needs an id"),
        (
            make_row("t9", rubrics=((5, "Advises rest", ("axis:completeness",)), (3, "", ()))),
            2,
            "rubrics.1.criterion: is empty: a rubric item needs a criterion to grade",
        ),
    ],
)
def test_a_row_with_an_empty_id_or_criterion_is_a_data_error(
    tmp_path: Path, fake: FakeOpenAI, row: dict[str, object], line: int, field: str
) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("t1"), row])
    result = run_eval(data, str(tmp_path / "out"), fake.base_url or "")
    assert result.exit_code == 1
    assert last_line(result) == f"Error: {data}:{line}: field {field}"
    assert fake.requests_total == 0


def test_an_empty_professional_id_or_criterion_is_a_data_error(tmp_path: Path, fake: FakeOpenAI) -> None:
    def row(identity: str, criterion: str) -> dict[str, object]:
        return {
            "id": identity,
            "conversation": [{"role": "user", "content": "My knee hurts."}],
            "rubric_items": [{"criterion_text": criterion, "points": 5}],
        }

    for given, field in ((row("", "Asks when it started"), "id: is empty"), (row("x", " "), "criterion_text: is")):
        data = write_jsonl(tmp_path / "pro.jsonl", [given])
        result = run_eval(data, str(tmp_path / "out"), fake.base_url or "")
        assert result.exit_code == 1 and f"{data}:1: field " in last_line(result) and field in last_line(result)
    assert fake.requests_total == 0


@pytest.mark.parametrize(
    ("price", "said"),
    [("-0.5", "greater than or equal to 0"), ("1e400", "finite number"), ("NaN", "finite number")],
)
def test_a_price_negative_or_not_finite_is_refused_before_any_call(
    tmp_path: Path, data: Path, fake: FakeOpenAI, price: str, said: str
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(f'{{"fake-model": {{"input": {price}, "cached_input": 0.1, "output": 1.0}}}}')
    result = run_eval(data, str(tmp_path / "out"), fake.base_url or "", "--prices", str(prices))
    assert result.exit_code == 1
    assert last_line(result).startswith(f"Error: {prices}: field fake-model.input: ") and said in last_line(result)
    assert fake.requests_total == 0
    assert not (tmp_path / "out" / "usage.json").exists()


def test_usage_json_stays_json_with_any_price_given(tmp_path: Path, data: Path, fake: FakeOpenAI) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"fake-model": {"input": 1000000, "cached_input": 1000000, "output": 1000000}}')
    result = run_eval(data, str(tmp_path / "out"), fake.base_url or "", "--prices", str(prices))
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out" / "usage.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in usage.json"))


@pytest.mark.parametrize("number", [math.inf, -math.inf, math.nan])
def test_no_json_file_is_written_with_a_number_that_is_not_finite(tmp_path: Path, number: float) -> None:
    with pytest.raises(OutputUnusable, match="not finite"):
        write_json(tmp_path / "usage.json", {"whole_run": {"cost_usd": number}})
    assert list(tmp_path.iterdir()) == []


def test_a_data_file_that_is_not_utf8_is_named_with_its_line(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = tmp_path / "rows.jsonl"
    lines = [json.dumps(make_row(f"t{i}")).encode() for i in range(3)]
    lines[2] = lines[2].replace(b"headache", b"head\xe9che")  # latin-1, as a spreadsheet may save it
    data.write_bytes(b"\n".join(lines) + b"\n")
    result = run_eval(data, str(tmp_path / "out"), fake.base_url or "")
    assert result.exit_code == 1
    assert last_line(result).startswith(f"Error: {data}:3: not UTF-8 text (invalid continuation byte at byte ")
    assert fake.requests_total == 0
