"""HealthBench scoring (SPEC section 4): pure functions, no I/O.

A task's score is the points of the items judged met (negative items included) over the positive points
available. It is not clipped: a reply that meets many undesirable criteria scores below zero, and that is
the reward. Aggregates clip the mean of task scores to [0, 1], never the task scores themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

N_BOOTSTRAP = 1000


def score(points: Sequence[int], met: Sequence[bool]) -> float | None:
    """Points met over positive points available; None when no item has positive points."""
    if len(points) != len(met):
        raise ValueError("points and verdicts differ in length")
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
        raise ValueError("a task needs at least one rubric item with positive points")
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
    per_task: Sequence[Mapping[str, float]], *, seed: int = 0, n_bootstrap: int = N_BOOTSTRAP
) -> dict[str, float | int]:
    """Aggregate per-task metric dicts as the reference does, with a seeded bootstrap.

    For each metric m, over the tasks that have it: `m` (clipped mean), `m:n_samples`, and
    `m:bootstrap_std` (population std of `n_bootstrap` clipped resample means). `score` duplicates
    `overall_score`, as the reference's top-line key. Resamples are drawn once per sample count and
    shared by metrics of that count: each metric's interval is still an ordinary bootstrap.
    """
    import numpy as np

    values: dict[str, list[float]] = {}
    for metrics in per_task:
        for name, value in metrics.items():
            values.setdefault(name, []).append(value)
    if "overall_score" in values:
        values["score"] = values["overall_score"]
    rng = np.random.default_rng(seed)
    resamples: dict[int, np.ndarray] = {}
    out: dict[str, float | int] = {}
    for name, series in values.items():
        array = np.asarray(series, dtype=np.float64)
        n = len(array)
        if n not in resamples:
            resamples[n] = rng.integers(0, n, size=(n_bootstrap, n))
        means = np.clip(array[resamples[n]].mean(axis=1), 0.0, 1.0)
        out[name] = clipped_mean(series)
        out[f"{name}:n_samples"] = n
        out[f"{name}:bootstrap_std"] = float(np.std(means))
    return out
