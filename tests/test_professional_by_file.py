"""HealthBench Professional given as a file (`--data`, Inspect's and verifiers' `data=`): told from its schema and
graded exactly as `--subset professional` is, with the official grader, the length adjustment, run.json's
account of the official configuration, and one line on stderr saying so."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from healthbench.cli import main
from healthbench.data.professional import PROFESSIONAL_FILENAME
from healthbench.data.source import TaskSource
from healthbench.grading.official import PROFESSIONAL_GRADER
from healthbench.grading.scoring import PROFESSIONAL_LENGTH_ADJUSTMENT
from healthbench.grading.settings import GraderConfig
from healthbench.integrations.common import load_tasks
from healthbench.runs.folder import RunFolder
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.test_professional_runs import OFFICIAL, check_run, pro_row, run

RECOGNISED = "is in HealthBench Professional's schema, so it is graded as --subset professional is"


@pytest.fixture
def pro_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[dict[str, Any]]]:
    """30 made-up Professional rows in a file of the user's own name (and under the official name in a
    HEALTHBENCH_DATA_DIR folder, for the same rows through `--subset professional`)."""
    rows = [pro_row(i) for i in range(30)]
    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(folder / PROFESSIONAL_FILENAME, rows)
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(folder))
    monkeypatch.setenv("HEALTHBENCH_ALLOW_ROW_COUNT_MISMATCH", "1")  # 30 rows, not the official 525
    monkeypatch.setenv("HEALTHBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HEALTHBENCH_GRADER_MODEL", raising=False)
    return write_jsonl(tmp_path / "my-professional.jsonl", rows), rows


def test_the_kind_is_told_from_the_first_row_alone(tmp_path: Path) -> None:
    pro = write_jsonl(tmp_path / "pro.jsonl", [pro_row(0)])
    # A broken second line: the kind is told without reading it (the rows are loaded later, once).
    with pro.open("a") as handle:
        handle.write("{not json\n")
    source = TaskSource.file(pro)
    assert (source.kind, source.professional_file, source.name) == ("professional", True, str(pro))
    plain = TaskSource.file(write_jsonl(tmp_path / "plain.jsonl", [make_row("a")]))
    assert (plain.kind, plain.professional_file) == (None, False)
    named = TaskSource.named("professional")
    assert (named.kind, named.professional_file, named.name) == ("professional", False, "subset:professional")
    assert TaskSource.named("hard").kind == "hard"


def test_grade_by_file_is_the_subset_exactly(
    tmp_path: Path, pro_file: tuple[Path, list[dict[str, Any]]], fake: FakeOpenAI
) -> None:
    assert fake.base_url
    data, rows = pro_file
    replies = {row["id"]: f"Reply {i}: " + "plan " * (i * 37 % 900) for i, row in enumerate(rows)}
    answers = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    by_file = run("grade", "--data", str(data), "--responses", str(answers), "--out", str(tmp_path / "file"),
                  base_url=fake.base_url)  # fmt: skip
    assert by_file.exit_code == 0, by_file.output
    assert [line for line in by_file.stderr.splitlines() if RECOGNISED in line] == [
        f"healthbench: {data} {RECOGNISED} (its official grader and length adjustment, unless flags say otherwise)"
    ]
    recorded = check_run(tmp_path / "file", rows, replies, fake)  # gpt-5.4 at low effort, Responses, adjusted
    assert recorded.official is not None and recorded.official.configuration
    assert recorded.adjustment == PROFESSIONAL_LENGTH_ADJUSTMENT
    assert recorded.data.source == str(data)

    fake.reset()
    by_name = run("grade", "--subset", "professional", "--responses", str(answers), "--out", str(tmp_path / "name"),
                  base_url=fake.base_url)  # fmt: skip
    assert by_name.exit_code == 0, by_name.output
    assert RECOGNISED not in by_name.stderr
    named = RunFolder(tmp_path / "name").require_run().spec
    same = ("official", "length_adjustment", "grader")
    assert named.model_dump(include=set(same)) == recorded.model_dump(include=set(same))
    metrics = (tmp_path / "file" / "metrics.json").read_text()
    assert metrics == (tmp_path / "name" / "metrics.json").read_text()


def test_a_file_graded_otherwise_is_recorded_as_not_official(
    tmp_path: Path, pro_file: tuple[Path, list[dict[str, Any]]], fake: FakeOpenAI
) -> None:
    assert fake.base_url
    data, rows = pro_file
    answers = write_jsonl(tmp_path / "r.jsonl", [{"prompt_id": r["id"], "response": "Rest."} for r in rows[:3]])
    result = run("grade", "--data", str(data), "--responses", str(answers), "--out", str(tmp_path / "o"),
                 "--grader-model", "gpt-4.1-2025-04-14", "--no-length-adjustment", base_url=fake.base_url)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert RECOGNISED in result.stderr and "not HealthBench Professional's official configuration" in result.stderr
    spec = RunFolder(tmp_path / "o").require_run().spec
    assert spec.official is not None and not spec.official.configuration and spec.length_adjustment is None
    assert {d.setting for d in spec.official.differences} == {
        "grader model",
        "grader reasoning effort",
        "length adjustment",
    }


def test_eval_and_baseline_by_file(
    tmp_path: Path, pro_file: tuple[Path, list[dict[str, Any]]], fake: FakeOpenAI
) -> None:
    assert fake.base_url
    data, rows = pro_file
    estimate = run("eval", "--model", "gpt-4.1", "--base-url", fake.base_url, "--data", str(data), "--out",
                   str(tmp_path / "e"), "--dry-run", "--json", base_url=fake.base_url)  # fmt: skip
    assert estimate.exit_code == 0, estimate.output
    assert RECOGNISED in estimate.stderr
    assert json.loads(estimate.stdout)["grader"]["model"] == OFFICIAL and fake.requests_total == 0

    result = run("baseline", "--data", str(data), "--out", str(tmp_path / "b"), base_url=fake.base_url)
    assert result.exit_code == 0, result.output
    recorded = check_run(tmp_path / "b", rows, {row["id"]: row["physician_response"] for row in rows}, fake)
    assert recorded.baseline is not None and recorded.baseline.completions == "physician responses"
    assert recorded.official is not None and recorded.official.configuration


def test_serve_grades_the_test_split_of_a_professional_file(
    pro_file: tuple[Path, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, rows = pro_file
    served: dict[str, Any] = {}

    def capture(splits: dict[str, Any], **settings: Any) -> None:
        served.update(settings, splits=splits)

    monkeypatch.setattr("healthbench.integrations.openreward.environment.serve", capture)
    result = CliRunner().invoke(main, ["serve", "--data", str(data), "--port", "0"])
    assert result.exit_code == 0, result.output
    assert RECOGNISED in result.stderr
    assert [row.prompt_id for row in served["splits"]["test"]] == [row["id"] for row in rows]
    grader: GraderConfig = served["grader"]["test"]
    assert {name: getattr(grader, name) for name in PROFESSIONAL_GRADER} == PROFESSIONAL_GRADER
    # Its training splits beside it are graded as it is.
    assert {"test", "train"} <= set(served["splits"])
    assert served["adjustments"] == {name: PROFESSIONAL_LENGTH_ADJUSTMENT for name in served["splits"]}
    assert all(served["grader"][name] == grader for name in served["splits"])


def test_integrations_take_the_kind_and_warn_of_a_limit_past_the_rows(
    pro_file: tuple[Path, list[dict[str, Any]]], caplog: pytest.LogCaptureFixture
) -> None:
    data, rows = pro_file
    with caplog.at_level(logging.WARNING, logger="healthbench"):
        tasks = load_tasks(data=data, limit=100)
    assert tasks.kind == "professional" and len(tasks.rows) == len(rows)
    said = [record.getMessage() for record in caplog.records]
    assert any(RECOGNISED.replace("--subset professional", "subset=professional") in line for line in said)
    assert "limit=100 is more than the 30 tasks in the data; running all 30" in said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="healthbench"):
        assert load_tasks(subset="professional", limit=30).kind == "professional"
    assert not caplog.records  # a subset by name says nothing; a limit of all the rows is not past them


def test_inspect_task_by_file_has_the_official_settings(pro_file: tuple[Path, list[dict[str, Any]]]) -> None:
    pytest.importorskip("inspect_ai")
    from healthbench.integrations.inspect_task import healthbench

    data, _ = pro_file
    task = healthbench(data=str(data), limit=4)
    assert task.metadata is not None
    assert task.metadata["grader"]["model"] == OFFICIAL
    assert task.metadata["length_adjustment"] == PROFESSIONAL_LENGTH_ADJUSTMENT.as_dict()
