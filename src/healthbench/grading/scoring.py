"""HealthBench scoring (docs/SPEC.md section 4): pure functions, no I/O.

A task's score is the points of the items judged met (negative items included) over the positive points
available. It is not clipped: a reply that meets many undesirable criteria scores below zero, and that is
the reward. Aggregates clip the mean of task scores to [0, 1], never the task scores themselves.
A length adjustment (docs/SPEC.md section 7) shifts each task score by the reply's length, unclipped too; its
aggregate is the clipped mean of the adjusted scores, like any other metric. Worst-at-k, over repeated
samples of each task, is the mean of the lowest of K of a task's scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from healthbench.errors import DataError, SettingsError
from healthbench.grading.bootstrap import N_BOOTSTRAP, Bootstrap

LENGTH_ADJUSTED = "overall_score_length_adjusted"
# metrics.json names worst-at-k of K samples `worst_at_k:K`.
WORST_AT_K = "worst_at_k"


def score(points: Sequence[int], met: Sequence[bool]) -> float | None:
    """Points met over positive points available; None when no item has positive points."""
    if len(points) != len(met):
        raise DataError("points and verdicts differ in length")
    possible = sum(p for p in points if p > 0)
    if possible == 0:
        return None
    return sum(p for p, m in zip(points, met, strict=True) if m) / possible


def task_metrics(
    example_tags: Sequence[str],
    points: Sequence[int],
    item_tags: Sequence[Sequence[str]],
    met: Sequence[bool],
) -> dict[str, float]:
    """The per-task metric dict: `overall_score`, each example tag, and each rubric tag that can be scored.

    Example tags carry the task score; a rubric tag carries the score restricted to the items tagged
    with it, and is left out when those items have no positive points.
    """
    overall = score(points, met)
    if overall is None:
        raise DataError("a task needs at least one rubric item with positive points")
    metrics = {"overall_score": overall}
    metrics.update(dict.fromkeys(example_tags, overall))
    by_tag: dict[str, tuple[list[int], list[bool]]] = {}
    for p, tags, m in zip(points, item_tags, met, strict=True):
        for tag in tags:
            tag_points, tag_met = by_tag.setdefault(tag, ([], []))
            tag_points.append(p)
            tag_met.append(m)
    for tag, (tag_points, tag_met) in by_tag.items():
        tag_score = score(tag_points, tag_met)
        if tag_score is not None:
            metrics[tag] = tag_score
    return metrics


def clipped_mean(values: Sequence[float]) -> float:
    """The mean of the values, then clipped to [0, 1]."""
    import numpy as np  # deferred: numpy costs 0.2 s of start-up, and only aggregation needs it

    return float(np.clip(np.mean(values), 0.0, 1.0))


def aggregate(
    per_task: Sequence[Mapping[str, float]],
    *,
    seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
    headline: str = "overall_score",
) -> dict[str, float | int]:
    """Aggregate per-task metric dicts as the reference does, with a seeded bootstrap.

    For each metric m, over the tasks that have it: `m` (clipped mean), `m:n_samples`, and
    `m:bootstrap_std` (population std of `n_bootstrap` clipped resample means). `score` duplicates the
    `headline` metric (`overall_score`, as the reference's top-line key, unless told otherwise).
    Resamples are drawn once per sample count, in the order metric names first appear, and shared by
    metrics of that count: each metric's interval is still an ordinary bootstrap.
    """
    import numpy as np

    values: dict[str, list[float]] = {}
    for metrics in per_task:
        for name, value in metrics.items():
            values.setdefault(name, []).append(value)
    if headline in values:
        values["score"] = values[headline]
    by_count: dict[int, list[str]] = {}
    for name, series in values.items():
        by_count.setdefault(len(series), []).append(name)
    bootstrap = Bootstrap(seed, n_bootstrap)
    resampled: dict[str, np.ndarray] = {}
    for names in by_count.values():
        arrays = [np.asarray(values[name], dtype=np.float64) for name in names]
        resampled |= zip(names, bootstrap.means(*arrays), strict=True)
    out: dict[str, float | int] = {}
    for name, series in values.items():
        out[name] = clipped_mean(series)
        out[f"{name}:n_samples"] = len(series)
        out[f"{name}:bootstrap_std"] = float(np.std(np.clip(resampled[name], 0.0, 1.0)))
    return out


def mean_worst_of_k(scores: Sequence[float], k: int) -> float:
    """The mean, over all `k`-element subsets of `scores`, of the subset's lowest score.

    With the scores sorted ascending as s_1..s_n, s_i is the minimum of exactly C(n-i, k-1) of the C(n, k)
    subsets (those that take it and k-1 of the n-i scores above it), so the mean is
    sum_i s_i * C(n-i, k-1) / C(n, k): exact, without enumerating subsets.
    """
    n = len(scores)
    if not 1 <= k <= n:
        raise SettingsError(f"worst-of-k needs 1 <= k <= {n} scores, got k={k}")
    total = math.comb(n, k)
    return sum(s * math.comb(n - i, k - 1) for i, s in enumerate(sorted(scores), start=1)) / total


def worst_at_k(per_task: Sequence[Sequence[float]]) -> dict[int, float]:
    """Worst-at-k (docs/SPEC.md section 4) for K = 1..n, each task having the same number n of sample scores: the
    mean over tasks of each task's mean worst-of-K, clipped to [0, 1]. K = 1 is the pooled mean."""
    counts = {len(scores) for scores in per_task}
    if len(counts) != 1 or 0 in counts:
        raise DataError(f"worst-at-k needs the same number of samples for every task, got counts {sorted(counts)}")
    (n,) = counts
    return {k: clipped_mean([mean_worst_of_k(scores, k) for scores in per_task]) for k in range(1, n + 1)}


@dataclass(frozen=True)
class LengthAdjustment:
    """Length-adjusted scoring (docs/SPEC.md section 7): each character past `center` costs
    `penalty_per_500_chars / 500` of score, and each character short of it gains as much."""

    center: float
    penalty_per_500_chars: float

    def __post_init__(self) -> None:
        for name in ("center", "penalty_per_500_chars"):
            value = getattr(self, name)
            # bool is an int, and True as a center is a mistake, not 1 character.
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise SettingsError(f"length adjustment: {name} must be a finite number, not {value!r}")
        if self.center < 0 or self.penalty_per_500_chars < 0:
            raise SettingsError(f"length adjustment: center and penalty must not be negative: {self.as_dict()}")

    def adjust(self, score: float, reply: str) -> float:
        """The task score adjusted for the reply's length in characters; unclipped, like the score."""
        return score - self.penalty_per_500_chars * (len(reply) - self.center) / 500

    def describe(self) -> str:
        """The settings in words, as the report and run summaries show them."""
        return f"center {self.center:.10g} characters, {self.penalty_per_500_chars:.10g} per 500 characters"

    def as_dict(self) -> dict[str, float]:
        """The settings as run.json records them."""
        return {"center": self.center, "penalty_per_500_chars": self.penalty_per_500_chars}


# HealthBench Professional's official settings; the other subsets have none (docs/SPEC.md section 7).
PROFESSIONAL_LENGTH_ADJUSTMENT = LengthAdjustment(2000, 0.0147)
