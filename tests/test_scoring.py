"""Scoring against numbers computed by hand (SPEC section 4)."""

from __future__ import annotations

import math

import pytest

from healthbench.grading.scoring import aggregate, clipped_mean, score, task_metrics


def test_score_counts_negative_items_and_is_unclipped() -> None:
    # possible = 5 + 3 + 2 = 10; met = 5 - 2 + 2 = 5
    assert score([5, 3, -2, -4, 2], [True, False, True, False, True]) == 0.5
    # only undesirable behaviour met: -5 / 2
    assert score([2, -5], [False, True]) == -2.5
    assert score([-1, -2], [True, True]) is None
    with pytest.raises(ValueError):
        score([1], [True, False])


def test_task_metrics_tags() -> None:
    metrics = task_metrics(
        ["theme:hedging", "physician_agreed_category:enough-context"],
        [5, 3, -2, -4, 2],
        [
            ["axis:accuracy", "level:example"],
            ["axis:completeness", "level:example"],
            ["axis:accuracy", "level:example"],
            ["axis:context_awareness", "level:cluster", "cluster:hedging_x"],
            ["axis:completeness", "level:cluster", "cluster:hedging_x"],
        ],
        [True, False, True, False, True],
    )
    assert metrics == {
        "overall_score": 0.5,
        "theme:hedging": 0.5,
        "physician_agreed_category:enough-context": 0.5,
        "axis:accuracy": 0.6,  # (5 - 2) / 5
        "axis:completeness": 0.4,  # 2 / (3 + 2)
        "level:example": 0.375,  # (5 - 2) / (5 + 3)
        "level:cluster": 1.0,  # 2 / 2; the unmet -4 costs nothing
        "cluster:hedging_x": 1.0,
    }
    # axis:context_awareness has only a negative item: no positive points, so no metric
    assert "axis:context_awareness" not in metrics


def test_clip_applies_to_the_mean_only() -> None:
    assert clipped_mean([1.0, 0.5, -0.25]) == pytest.approx(1.25 / 3)
    assert clipped_mean([0.5, -2.5, 1.0]) == 0.0
    assert clipped_mean([1.0, 1.0]) == 1.0


def test_aggregate_keys_and_counts() -> None:
    tasks = [
        {"overall_score": 0.5, "theme:a": 0.5, "axis:x": 1.0},
        {"overall_score": -2.5, "theme:a": -2.5},
        {"overall_score": 1.0, "theme:b": 1.0, "axis:x": 0.25},
    ]
    out = aggregate(tasks, seed=1)
    assert out["overall_score"] == 0.0
    assert out["score"] == out["overall_score"]
    assert out["score:n_samples"] == out["overall_score:n_samples"] == 3
    assert out["score:bootstrap_std"] == out["overall_score:bootstrap_std"]
    assert out["theme:a"] == 0.0 and out["theme:a:n_samples"] == 2
    assert out["theme:b"] == 1.0 and out["theme:b:n_samples"] == 1 and out["theme:b:bootstrap_std"] == 0.0
    assert out["axis:x"] == 0.625 and out["axis:x:n_samples"] == 2
    assert set(out) == {
        f"{m}{s}"
        for m in ("overall_score", "score", "theme:a", "theme:b", "axis:x")
        for s in ("", ":n_samples", ":bootstrap_std")
    }


def test_bootstrap_is_seeded_and_matches_its_distribution() -> None:
    tasks = [{"overall_score": 0.0}, {"overall_score": 1.0}]
    first = aggregate(tasks, seed=7)
    assert aggregate(tasks, seed=7) == first
    assert aggregate(tasks, seed=8)["score:bootstrap_std"] != first["score:bootstrap_std"]
    # resample means of two values are 0, 0.5, 1 with probability 1/4, 1/2, 1/4: std sqrt(1/8)
    assert first["score:bootstrap_std"] == pytest.approx(math.sqrt(1 / 8), abs=0.03)


def test_bootstrap_clips_each_resample_mean() -> None:
    # every resample mean of these is >= 1 once clipped, so the spread is exactly zero
    out = aggregate([{"overall_score": 1.0}, {"overall_score": 3.0}], seed=0)
    assert out["score"] == 1.0
    assert out["score:bootstrap_std"] == 0.0


def test_score_duplicates_the_headline_metric_it_is_given() -> None:
    tasks = [{"overall_score": 0.5, "other": 0.25}, {"overall_score": 1.0, "other": 0.75}]
    default, other = aggregate(tasks, seed=2), aggregate(tasks, seed=2, headline="other")
    assert default["score"] == 0.75 and other["score"] == 0.5
    assert other["score:bootstrap_std"] == other["other:bootstrap_std"] == default["other:bootstrap_std"]
    assert {k: v for k, v in other.items() if not k.startswith("score")} == {
        k: v for k, v in default.items() if not k.startswith("score")
    }
