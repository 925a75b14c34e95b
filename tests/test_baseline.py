"""Physician baselines: which samples are graded, and `healthbench baseline` checked against the reference."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.data.schema import Row
from healthbench.errors import DataError
from healthbench.runs.baselines import baseline_jobs, group_name
from healthbench.runs.folder import RunFolder
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY, expected_means, reference_metrics, sent_prompts


def ideal(group: int, prompt_id: str, references: int = 4) -> dict[str, Any]:
    return {
        "ideal_completion": f"Physician answer to {prompt_id}: rest, fluids, and see a doctor if it worsens.",
        "ideal_completions_group": f"Group {group}",
        "ideal_completions_ref_completions": [f"Reference {i} for {prompt_id}." for i in range(references)],
    }


def made_up_rows() -> list[dict[str, Any]]:
    rows = [make_row(f"g{group}-{i}", ideal=ideal(group, f"g{group}-{i}")) for group in (1, 2, 3) for i in range(6)]
    rows.append(make_row("no-ideal"))
    rows.append(
        make_row(
            "multi",
            prompt=(("user", "My child has a fever."), ("assistant", "How old?"), ("user", "Two.")),
            ideal=ideal(3, "multi"),
        )
    )
    return rows


def reference_samples(rows: list[dict[str, Any]], group: int, references: bool) -> list[tuple[dict[str, Any], str]]:
    """The reference's examples in physician-completions mode: (row, completion to grade), in its order."""
    matching = [
        r
        for r in rows
        if r["ideal_completions_data"] is not None
        and r["ideal_completions_data"]["ideal_completions_group"] == f"Group {group}"
    ]
    if references:
        return [(r, c) for r in matching for c in r["ideal_completions_data"]["ideal_completions_ref_completions"]]
    return [(r, r["ideal_completions_data"]["ideal_completion"]) for r in matching]


def reference_expected(samples: list[tuple[dict[str, Any], str]]) -> tuple[dict[str, float], Counter[str], int]:
    """Means (clipped), grader prompts and sample count the reference computes for these samples."""
    per_task: list[dict[str, float]] = []
    prompts = Counter[str]()
    for row, completion in samples:
        metrics, row_prompts = reference_metrics([row], {row["prompt_id"]: completion})
        per_task += metrics
        prompts += row_prompts
    return expected_means(per_task), prompts, len(per_task)


def baseline(data: Path, out: Path, base_url: str, *extra: str) -> Result:
    args = ["baseline", "--data", str(data), "--out", str(out), "--grader-base-url", base_url, "--no-progress"]
    return CliRunner().invoke(main, [*args, *extra], env={"HEALTHBENCH_GRADER_API_KEY": KEY})


def check_metrics(out: Path, expected: dict[str, float], samples: int) -> None:
    metrics = json.loads((out / "metrics.json").read_text())
    assert {k for k in metrics if not k.endswith((":n_samples", ":bootstrap_std"))} == set(expected)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, abs=1e-9), name
    assert metrics["score:n_samples"] == samples


def test_jobs_are_the_reference_samples() -> None:
    rows = [Row.model_validate(r) for r in made_up_rows()]
    ideal_jobs = baseline_jobs(rows, 3)
    assert [(j.row.prompt_id, j.repeat) for j in ideal_jobs] == [(f"g3-{i}", 0) for i in range(6)] + [("multi", 0)]
    assert ideal_jobs[0].reply == "Physician answer to g3-0: rest, fluids, and see a doctor if it worsens."
    reference_jobs = baseline_jobs(rows, 2, references=True)
    assert [(j.row.prompt_id, j.repeat, j.reply) for j in reference_jobs[:5]] == [
        *((("g2-0", i, f"Reference {i} for g2-0.")) for i in range(4)),
        ("g2-1", 0, "Reference 0 for g2-1."),
    ]
    drawn = baseline_jobs(rows, 2, references=True, limit=7)
    assert drawn == random.Random(0).sample(reference_jobs, 7)
    assert baseline_jobs(rows, 2, references=True, limit=24) == reference_jobs
    with pytest.raises(ValueError, match="Group 1 physicians were shown no reference completions"):
        baseline_jobs(rows, 1, references=True)
    with pytest.raises(ValueError, match="no physician group 4"):
        group_name(4)
    with pytest.raises(DataError, match="no row has physician completions of Group 2"):
        baseline_jobs(rows[:6], 2)
    short = Row.model_validate(make_row("short", ideal=ideal(2, "short", references=3)))
    with pytest.raises(DataError, match="row short: Group 2 rows have 4 reference completions, this one has 3"):
        baseline_jobs([short], 2, references=True)


def test_made_up_references_match_the_reference(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    assert fake.base_url
    result = baseline(data, tmp_path / "out", fake.base_url, "--group", "3", "--references")
    assert result.exit_code == 0, result.output
    expected, prompts, samples = reference_expected(reference_samples(rows, 3, references=True))
    check_metrics(tmp_path / "out", expected, samples)
    assert sent_prompts(fake) == prompts  # no system message: the transcript is the prompt and the completion
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().split("\n")[:-1]]
    assert {(r["prompt_id"], r["repeat"]): r["response"] for r in results} == {
        (f"g3-{i}" if i < 6 else "multi", k): f"Reference {k} for {f'g3-{i}' if i < 6 else 'multi'}."
        for i in range(7)
        for k in range(4)
    }
    assert all(r["prompt"][0]["role"] == "user" for r in results)
    run = RunFolder(tmp_path / "out").require_run()
    assert run.spec.baseline is not None
    assert (run.spec.command, run.spec.baseline.group, run.spec.baseline.references) == ("baseline", 3, True)
    assert run.stats.samples == 28
    assert "report" in (tmp_path / "out" / "report.html").read_text().lower()


def test_limit_draws_from_the_expanded_samples(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    assert fake.base_url
    result = baseline(data, tmp_path / "out", fake.base_url, "--group", "2", "--references", "--limit", "9")
    assert result.exit_code == 0, result.output
    expanded = [(r, i, c) for r, c in reference_samples(rows, 2, references=True) for i in [int(c.split()[1])]]
    chosen = random.Random(0).sample(expanded, 9)
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().split("\n")[:-1]]
    assert sorted((r["prompt_id"], r["repeat"]) for r in results) == sorted((r["prompt_id"], i) for r, i, _ in chosen)
    expected, _, samples = reference_expected([(r, c) for r, _, c in chosen])
    check_metrics(tmp_path / "out", expected, samples)
    fake.reset()
    again = baseline(data, tmp_path / "out", fake.base_url, "--group", "2", "--references", "--limit", "9")
    assert again.exit_code == 0 and fake.requests_total == 0
    other = baseline(data, tmp_path / "out", fake.base_url, "--group", "2", "--limit", "9")
    assert other.exit_code == 1 and "other settings (references: true -> false)" in other.output


def test_group_1_references_are_refused(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows())
    assert fake.base_url
    result = baseline(data, tmp_path / "out", fake.base_url, "--group", "1", "--references")
    assert result.exit_code == 2
    assert "Group 1 physicians were shown no reference completions; use --group 2 or 3" in result.output
    assert fake.requests_total == 0 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("group", "references"), [(1, False), (2, False), (3, False), (3, True)])
def test_sample_baselines_match_the_reference(
    tmp_path: Path, sample_path: Path, fake: FakeOpenAI, group: int, references: bool
) -> None:
    rows = [json.loads(line) for line in sample_path.read_text().split("\n")[:-1]]
    assert fake.base_url
    flags = ("--group", str(group), *(("--references",) if references else ()))
    result = baseline(sample_path, tmp_path / "out", fake.base_url, *flags)
    assert result.exit_code == 0, result.output
    expected, prompts, samples = reference_expected(reference_samples(rows, group, references))
    check_metrics(tmp_path / "out", expected, samples)
    assert samples == {1: 145, 2: 149, 3: 139}[group] * (4 if references else 1)
    assert sent_prompts(fake) == prompts
