"""The Inspect task end to end: Inspect's `openai-api` provider samples the policy from the loopback fake, this
project's grader grades through the same fake, and every score equals `healthbench grade` on the same replies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("inspect_ai")

from inspect_ai import eval as inspect_eval
from inspect_ai.log import EvalLog

from healthbench.cli import main
from healthbench.grading.scoring import aggregate
from healthbench.integrations.inspect_task import healthbench
from healthbench.testing import GRADER_MARKER, FakeOpenAI
from tests.conftest import write_jsonl
from tests.reference import KEY, made_up_rows
from tests.runfiles import aggregate_records
from tests.test_grade_cli import grade

POLICY_KEY = "sk-policy-never-stored-0123456789"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    # The policy's key (openai-api/fake/... reads FAKE_API_KEY) and the grader's own.
    monkeypatch.setenv("FAKE_API_KEY", POLICY_KEY)
    monkeypatch.setenv("HEALTHBENCH_GRADER_API_KEY", KEY)
    monkeypatch.delenv("HEALTHBENCH_GRADER_BASE_URL", raising=False)
    monkeypatch.delenv("HEALTHBENCH_GRADER_MODEL", raising=False)


def run(tmp: Path, fake: FakeOpenAI, task_args: dict[str, Any], **options: Any) -> EvalLog:
    """`inspect eval healthbench/healthbench` through the entry point, policy and grader both on the fake."""
    assert fake.base_url
    logs = inspect_eval(
        "healthbench/healthbench",
        task_args={"grader_base_url": fake.base_url, **task_args},
        model="openai-api/fake/policy",
        model_base_url=fake.base_url,
        log_dir=str(tmp / "logs"),
        display="none",
        **options,
    )
    assert len(logs) == 1
    return logs[0]


def graded_by_cli(tmp: Path, data: Path, log: EvalLog, base_url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`healthbench grade` on the replies in the log: its results by prompt_id, and its metrics."""
    assert log.samples
    replies = [{"prompt_id": str(s.id), "response": s.output.completion} for s in log.samples]
    responses = write_jsonl(tmp / "responses.jsonl", replies)
    result = grade(tmp, data, responses, "grade", base_url)
    assert result.exit_code == 0, result.output
    lines = (tmp / "grade" / "results.jsonl").read_text().split("\n")[:-1]
    results = {r["prompt_id"]: r for r in map(json.loads, lines)}
    metrics: dict[str, Any] = json.loads((tmp / "grade" / "metrics.json").read_text())
    return results, metrics


def log_metrics(log: EvalLog) -> dict[str, float]:
    assert log.results is not None
    (scorer,) = log.results.scores
    return {name: m.value for name, m in scorer.metrics.items()}


def check_against_grade(tmp: Path, data: Path, log: EvalLog, fake: FakeOpenAI) -> dict[str, Any]:
    assert log.status == "success", log.error
    assert fake.base_url
    results, metrics = graded_by_cli(tmp, data, log, fake.base_url)
    assert log.samples and len(results) == len(log.samples)
    for sample in log.samples:
        assert sample.scores is not None
        score = sample.scores["healthbench"]
        expected = results[str(sample.id)]
        assert score.value == pytest.approx(expected["score"], abs=1e-9)
        assert score.metadata is not None
        assert score.metadata["rubric_items"] == expected["rubric_items"]  # verdicts and explanations
        assert score.metadata["metrics"] == pytest.approx(expected["metrics"], abs=1e-9)
    mine = log_metrics(log)
    assert mine["clipped_mean"] == pytest.approx(metrics["score"], abs=1e-9)
    assert mine["bootstrap_std"] == pytest.approx(metrics["score:bootstrap_std"], abs=1e-9)
    slices = {name: value for name, value in metrics.items() if name.startswith(("theme:", "axis:"))}
    slices = {name: value for name, value in slices.items() if not name.endswith(":n_samples")}
    assert set(mine) - {"clipped_mean", "bootstrap_std"} == set(slices)  # no worst-at-k of one sample a task
    for name, value in slices.items():
        assert mine[name] == pytest.approx(value, abs=1e-9), name
    return metrics


def test_made_up_rows_score_as_healthbench_grade_does(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    log = run(tmp_path, fake, {"data": str(data)})
    assert fake.base_url
    policy = [b for b in fake.bodies if GRADER_MARKER not in b["messages"][-1]["content"]]  # chat bodies only here
    multi = next(b for b in policy if b["messages"][-1]["content"] == "Two.")
    # The role-tagged conversation, as the row gives it.
    assert [(m["role"], m["content"]) for m in multi["messages"]] == [
        (m["role"], m["content"]) for m in rows[1]["prompt"]
    ]
    assert len(policy) == len(rows)
    metrics = check_against_grade(tmp_path, data, log, fake)
    assert 0 < metrics["score"] < 1
    assert f"Bearer {KEY}" in fake.auth_headers
    assert log.location
    assert KEY.encode() not in Path(log.location).read_bytes()
    # The scorer's options, which the log's header records, are its settings; rubrics ride on their samples.
    assert log.eval.scorers is not None
    (scorer,) = log.eval.scorers
    assert scorer.options == {"subset": None, "grading": {"grader_base_url": fake.base_url}}


def test_fifty_sample_tasks_score_as_grade_does(tmp_path: Path, sample_path: Path, fake: FakeOpenAI) -> None:
    log = run(tmp_path, fake, {"data": str(sample_path), "limit": 50})
    assert log.samples and len(log.samples) == 50
    check_against_grade(tmp_path, sample_path, log, fake)


def test_repeats_are_pooled_as_separate_samples(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows()[:6])
    log = run(tmp_path, fake, {"data": str(data), "n_repeats": 2, "seed": 3})
    assert log.status == "success", log.error
    assert log.samples and len(log.samples) == 12
    records = []
    for sample in log.samples:
        assert sample.scores is not None and sample.scores["healthbench"].metadata is not None
        records.append(sample.scores["healthbench"].metadata)
    assert sorted(r["repeat"] for r in records) == [0] * 6 + [1] * 6
    ordered = sorted(records, key=lambda r: (r["repeat"], r["prompt_id"]))
    expected = aggregate([r["metrics"] for r in ordered], seed=3)
    assert expected["score:n_samples"] == 12
    mine = log_metrics(log)
    assert mine["clipped_mean"] == pytest.approx(expected["score"], abs=1e-9)
    assert mine["bootstrap_std"] == pytest.approx(expected["score:bootstrap_std"], abs=1e-9)
    worst = aggregate_records(
        records, seed=3, model_samples=True
    )  # as healthbench eval --n-repeats 2 writes metrics.json
    assert {r["policy_model"] for r in records} == {"openai-api/fake/policy"}
    assert mine["worst_at_k:1"] == pytest.approx(worst["worst_at_k:1"], abs=1e-9)
    assert mine["worst_at_k:2"] == pytest.approx(worst["worst_at_k:2"], abs=1e-9)


def test_length_adjusted_scores_are_unclipped_and_the_headline_adjusted(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows()[:5])
    args = {"data": str(data), "length_adjustment_center": 2000, "length_adjustment_penalty_per_500_chars": 0.5}
    log = run(tmp_path, fake, args)
    assert log.status == "success", log.error
    assert log.samples
    records = []
    for sample in log.samples:
        assert sample.scores is not None
        score = sample.scores["healthbench"]
        assert score.metadata is not None
        raw, reply = score.metadata["score"], sample.output.completion
        assert score.value == pytest.approx(raw - 0.5 * (len(reply) - 2000) / 500, abs=1e-12)
        assert score.metadata["length_adjusted_score"] == score.value
        records.append(score.metadata)
    assert max(r["length_adjusted_score"] for r in records) > 1  # short replies gain, past 1: nothing is clipped
    mine = log_metrics(log)
    ordered = sorted(records, key=lambda r: r["prompt_id"])
    adjusted = [r["length_adjusted_score"] for r in ordered]
    assert mine["clipped_mean"] == pytest.approx(min(1.0, sum(adjusted) / len(adjusted)), abs=1e-9)
    raw_mean = sum(r["score"] for r in ordered) / len(ordered)
    assert mine["overall_score"] == pytest.approx(min(1.0, max(0.0, raw_mean)), abs=1e-9)


@pytest.mark.parametrize("fail_on_error", [False, True])
def test_a_grader_that_never_answers_gives_sample_errors_not_zeros(tmp_path: Path, fail_on_error: bool) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows()[:3])

    def grader_request(body: dict[str, Any]) -> bool:
        return GRADER_MARKER in body["messages"][-1]["content"]

    with FakeOpenAI(fail_always=grader_request) as fake:
        log = run(tmp_path, fake, {"data": str(data), "grader_max_attempts": 2}, fail_on_error=fail_on_error)
        assert fake.responses_by_kind["fail_always"] >= 2  # retried, within the bound
    if fail_on_error:
        assert log.status == "error" and log.results is None
        assert log.error is not None and "could not be graded" in log.error.message
        return
    assert log.results is None  # no metric at all: nothing was graded
    assert log.samples and len(log.samples) == 3
    for sample in log.samples:
        assert sample.error is not None
        assert f"task {sample.id}: rubric item" in sample.error.message
        assert "could not be graded" in sample.error.message and "after 2 attempts" in sample.error.message
        assert not sample.scores


def professional_row(task_id: str, use_case: str, specialty: str) -> dict[str, Any]:
    """A row in HealthBench Professional's published schema (made up, never real data)."""
    return {
        "id": task_id,
        "conversation": [
            {"role": "user", "content": f"Draft a {use_case} note for a made-up patient ({task_id})."},
            {"role": "assistant", "content": "Which diagnosis should it cover?"},
            {"role": "user", "content": "Community-acquired pneumonia."},
        ],
        "rubric_items": [
            {"criterion_text": "States the antibiotic course", "points": 7},
            {"criterion_text": "Names the follow-up interval", "points": 3},
            {"criterion_text": "Invents a lab value", "points": -4},
        ],
        "use_case": use_case,
        "type": "good_faith",
        "difficulty": "hard",
        "specialty": specialty,
        "physician_response": "Discharge summary: ...",
    }


def test_professional_in_its_official_configuration(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline = tmp_path / "data"
    offline.mkdir()
    pro = [
        professional_row(f"t{i}", ("consult", "writing", "research")[i % 3], ("Cardiology", "Oncology")[i % 2])
        for i in range(6)
    ]
    write_jsonl(offline / "healthbench_professional_eval.jsonl", pro)
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(offline))
    monkeypatch.setenv("HEALTHBENCH_ALLOW_ROW_COUNT_MISMATCH", "1")  # six rows, not the official 525
    log = run(tmp_path, fake, {"subset": "professional"})
    assert log.status == "success", log.error
    graders = [b for b in fake.bodies if "input" in b]
    assert len(graders) == 6 * 3
    for body in graders:  # gpt-5.4 at low effort through the Responses API: no temperature, no output cap
        assert body["model"] == "gpt-5.4-2026-03-05" and body["reasoning"] == {"effort": "low"}
        assert "temperature" not in body and "max_tokens" not in body and "max_output_tokens" not in body
    assert log.samples
    replies = [{"prompt_id": str(s.id), "response": s.output.completion} for s in log.samples]
    responses = write_jsonl(tmp_path / "responses.jsonl", replies)
    assert fake.base_url
    out = ["--out", str(tmp_path / "grade"), "--grader-base-url", fake.base_url, "--no-progress"]
    result = CliRunner().invoke(main, ["grade", "--subset", "professional", "--responses", str(responses), *out])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "grade" / "results.jsonl").read_text().split("\n")[:-1]
    results = {r["prompt_id"]: r for r in map(json.loads, lines)}
    metrics = json.loads((tmp_path / "grade" / "metrics.json").read_text())
    for sample in log.samples:
        assert sample.scores is not None
        expected = results[str(sample.id)]
        assert sample.scores["healthbench"].value == pytest.approx(expected["length_adjusted_score"], abs=1e-9)
    mine = log_metrics(log)
    assert mine["clipped_mean"] == pytest.approx(metrics["score"], abs=1e-9)
    assert mine["bootstrap_std"] == pytest.approx(metrics["score:bootstrap_std"], abs=1e-9)
    assert mine["overall_score"] == pytest.approx(metrics["overall_score"], abs=1e-9)
    for name in ("use_case:consult", "use_case:research", "type:good_faith", "difficulty:hard", "specialty:Oncology"):
        assert mine[name] == pytest.approx(metrics[name], abs=1e-9), name
        assert mine[f"{name}:bootstrap_std"] == pytest.approx(metrics[f"{name}:bootstrap_std"], abs=1e-9)


def test_grader_arguments_reach_the_grader(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows()[:2])
    task = healthbench(
        data=str(data),
        grader_model="o3",
        grader_api="responses",
        grader_reasoning_effort="high",
        grader_max_output_tokens=4000,
        grader_base_url="http://127.0.0.1:9/v1",
    )
    assert task.metadata is not None
    grader = task.metadata["grader"]
    assert grader["model"] == "o3" and grader["base_url"] == "http://127.0.0.1:9/v1"
    assert grader["request"] == {
        "api": "responses",
        "reasoning": True,
        "reasoning_effort": "high",
        "temperature": None,
        "max_output_tokens": 4000,
        "system_message": False,
    }
    with pytest.raises(ValueError, match="both `length_adjustment_center` and"):
        healthbench(data=str(data), length_adjustment_center=2000)
