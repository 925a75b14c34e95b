"""Worst-at-k (SPEC section 4): the exact formula against brute force, its aggregation over a run's records,
and `eval --n-repeats 3` end to end against a model whose replies vary from call to call."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from statistics import mean
from typing import Any

import pytest
from click.testing import CliRunner

from healthbench.cli import main
from healthbench.grading.scoring import LengthAdjustment, mean_worst_of_k, worst_at_k
from healthbench.testing import FakeOpenAI
from tests.conftest import numbered_rows, write_jsonl
from tests.reference import KEY
from tests.runfiles import aggregate_records


def brute_force(scores: list[float], k: int) -> float:
    return mean(min(subset) for subset in itertools.combinations(scores, k))


def test_mean_worst_of_k_by_hand() -> None:
    # {0.2, 0.8} -> 0.2, {0.2, 0.5} -> 0.2, {0.8, 0.5} -> 0.5: mean 0.3
    assert mean_worst_of_k([0.2, 0.8, 0.5], 2) == pytest.approx(0.3)
    assert mean_worst_of_k([0.2, 0.8, 0.5], 1) == pytest.approx(0.5)
    assert mean_worst_of_k([0.2, 0.8, 0.5], 3) == pytest.approx(0.2)
    # Ties and negative (unclipped) task scores count as they are.
    assert mean_worst_of_k([-0.6, 1.0, 1.0, 0.4], 2) == pytest.approx((3 * -0.6 + 2 * 0.4 + 1.0) / 6)


def test_mean_worst_of_k_equals_brute_force() -> None:
    rng = random.Random(7)
    for n in range(1, 9):
        for _ in range(20):
            scores = [
                rng.choice([-0.6, 0.0, 0.25, 0.4, 1.0]) if rng.random() < 0.5 else rng.uniform(-2, 1) for _ in range(n)
            ]
            for k in range(1, n + 1):
                assert mean_worst_of_k(scores, k) == pytest.approx(brute_force(scores, k), abs=1e-12)


def test_mean_worst_of_k_refuses_k_outside_1_to_n() -> None:
    with pytest.raises(ValueError, match="1 <= k <= 3"):
        mean_worst_of_k([0.1, 0.2, 0.3], 4)
    with pytest.raises(ValueError):
        mean_worst_of_k([0.1], 0)


def test_worst_at_k_means_over_tasks_then_clips() -> None:
    # Task a: [1.0, 0.5] -> worst-of-2 0.5; task b: [0.0, 0.5] -> 0.0. Means: K=1 0.5, K=2 0.25.
    assert worst_at_k([[1.0, 0.5], [0.0, 0.5]]) == pytest.approx({1: 0.5, 2: 0.25})
    # The mean over tasks is clipped, never a task's values: K=1 is (-0.5 + 1) / 2 (clipping the task
    # scores would give 0.75), and K=2 is (-2 + 1) / 2, shown as 0.
    assert worst_at_k([[-2.0, 1.0], [1.0, 1.0]]) == pytest.approx({1: 0.25, 2: 0.0})
    with pytest.raises(ValueError, match="same number of samples"):
        worst_at_k([[0.1, 0.2], [0.3]])


def record(prompt_id: str, repeat: int, score: float, response: str = "reply") -> dict[str, Any]:
    return {
        "prompt_id": prompt_id,
        "repeat": repeat,
        "score": score,
        "response": response,
        "metrics": {"overall_score": score, "theme:hedging": score},
        "policy_model": "m",
    }


def test_aggregate_records_adds_worst_at_k_only_with_repeats() -> None:
    records = [record("a", 0, 1.0), record("a", 1, 0.5), record("b", 0, 0.0), record("b", 1, 0.5)]
    metrics = aggregate_records(records, seed=0, model_samples=True)
    assert metrics["worst_at_k:1"] == pytest.approx(0.5) == pytest.approx(metrics["score"])
    assert metrics["worst_at_k:2"] == pytest.approx(0.25)
    assert "worst_at_k:3" not in metrics
    single = aggregate_records([record("a", 0, 1.0), record("b", 0, 0.0)], seed=0, model_samples=True)
    assert not any(name.startswith("worst_at_k") for name in single)
    # Four physicians' reference completions of a task are no repeats of one model.
    physicians = aggregate_records(records, seed=0, model_samples=False)
    assert not any(name.startswith("worst_at_k") for name in physicians)
    # Every other metric is what it was before worst-at-k existed.
    without = {k: v for k, v in metrics.items() if not k.startswith("worst_at_k")}
    assert list(metrics)[: len(without)] == list(without)


def test_worst_at_k_is_of_the_length_adjusted_score_when_the_headline_is() -> None:
    # Penalty 0.5 per 500 characters past 0: a 500-character reply loses 0.5, an empty one nothing.
    adjustment = LengthAdjustment(0, 0.5)
    records = [
        record("a", 0, 1.0, "x" * 500),
        record("a", 1, 1.0, ""),
        record("b", 0, 0.8, ""),
        record("b", 1, 0.8, ""),
    ]
    metrics = aggregate_records(records, seed=0, length_adjustment=adjustment, model_samples=True)
    # a: [0.5, 1.0] -> worst 0.5; b: [0.8, 0.8] -> 0.8
    assert metrics["worst_at_k:1"] == pytest.approx((0.75 + 0.8) / 2) == pytest.approx(metrics["score"])
    assert metrics["worst_at_k:2"] == pytest.approx((0.5 + 0.8) / 2)
    assert metrics["overall_score"] == pytest.approx(0.9)


def test_eval_with_three_repeats_writes_the_curve(tmp_path: Path) -> None:
    calls = itertools.count()

    def varying(body: dict[str, Any]) -> str | None:
        # The policy's reply changes with every call, so the repeats of a task are graded differently.
        if body.get("model") != "fake-model":
            return None
        return f"Reply number {next(calls)}: rest, drink water, and see a doctor if it persists."

    task_rows = numbered_rows(30)
    data = write_jsonl(tmp_path / "rows.jsonl", task_rows)
    out = tmp_path / "out"
    with FakeOpenAI(respond=varying) as fake:
        assert fake.base_url
        args = ["eval", "--model", "fake-model", "--base-url", fake.base_url, "--data", str(data), "--out", str(out)]
        args += ["--grader-base-url", fake.base_url, "--no-progress", "--n-repeats", "3"]
        env = {"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY}
        result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(results) == 90 and len({r["response"] for r in results}) == 90
    by_task: dict[str, list[float]] = {}
    for r in results:
        by_task.setdefault(r["prompt_id"], []).append(r["score"])
    assert all(len(scores) == 3 for scores in by_task.values())
    worst = [metrics[f"worst_at_k:{k}"] for k in (1, 2, 3)]
    for k, value in zip((1, 2, 3), worst, strict=True):
        by_definition = mean(brute_force(scores, k) for scores in by_task.values())
        assert value == pytest.approx(min(max(by_definition, 0.0), 1.0), abs=1e-12)
    assert "worst_at_k:4" not in metrics
    assert worst[0] == pytest.approx(metrics["score"])
    assert worst[0] >= worst[1] >= worst[2]
    assert worst[2] < worst[0]  # the replies vary, so the worst of three is below the mean
    report = (out / "report.html").read_text()
    assert 'id="worst-at-k"' in report and "lowest task score" in report
    assert f">{worst[2]:.3f}</text>" in report
    # Rebuilding from results.jsonl gives the same figures.
    rebuilt = CliRunner().invoke(main, ["report", str(out)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert json.loads((out / "metrics.json").read_text()) == metrics
