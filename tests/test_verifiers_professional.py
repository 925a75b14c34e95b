"""The verifiers environment given a HealthBench Professional file (`data=`): graded as the professional subset is,
with its official grader and length adjustment. Runs where verifiers is installed (`.venv-verifiers`)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

import healthbench
from healthbench.grading.official import PROFESSIONAL_GRADER
from healthbench.grading.scoring import PROFESSIONAL_LENGTH_ADJUSTMENT
from tests.conftest import make_row, write_jsonl


def test_a_professional_file_grades_with_its_official_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEALTHBENCH_GRADER_MODEL", raising=False)
    row = {
        "id": "pro-0",
        "conversation": [{"role": "user", "content": "Summarise the plan for a made-up patient."}],
        "rubric_items": [{"criterion_text": "Names the first-line option", "points": 5}],
    }
    [task] = list(healthbench.load_environment(data=write_jsonl(tmp_path / "mine.jsonl", [row])).taskset)
    grader = task.config.grader(task.config.subset)
    assert {name: getattr(grader, name) for name in PROFESSIONAL_GRADER} == PROFESSIONAL_GRADER
    assert task.config.length_adjustment(task.config.subset) == PROFESSIONAL_LENGTH_ADJUSTMENT
    # A file in HealthBench's own schema keeps the reference's grader and no adjustment.
    [plain] = list(healthbench.load_environment(data=write_jsonl(tmp_path / "plain.jsonl", [make_row("a")])).taskset)
    assert plain.config.grader(plain.config.subset).model == "gpt-4.1-2025-04-14"
    assert plain.config.length_adjustment(plain.config.subset) is None
