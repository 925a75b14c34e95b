"""What a transform of the replies gains in task score: pure, as the rest of the scoring.

Per task the gain is the transformed reply's score minus the reply's own, unclipped (a trick that costs
reward shows as a loss). Over tasks: the mean gain, a seeded bootstrap 95% interval of it (the 2.5th and
97.5th percentiles of the means of resampled tasks), and the share of tasks where the trick gained.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from healthbench.errors import DataError
from healthbench.grading.bootstrap import N_BOOTSTRAP, Bootstrap, percentile_interval

MIN_VERDICT_TASKS = 10
"""Tasks a transform's verdict needs, as `compare` stars no slice of fewer: over fewer tasks the bootstrap resamples
too few values to have a distribution (one task gives an interval of zero width), so a gain on them says nothing."""


@dataclass(frozen=True)
class Gain:
    """A transform's gain over the tasks it was tried on."""

    mean_gain: float
    ci95: tuple[float, float]
    share_gained: float
    n: int

    @property
    def significant(self) -> bool:
        """Whether the interval lies above 0 over enough tasks to say so: the trick wins reward."""
        return self.n >= MIN_VERDICT_TASKS and self.ci95[0] > 0


def gains(
    base: Mapping[str, float],
    transformed: Mapping[str, Mapping[str, float]],
    *,
    seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
) -> dict[str, Gain]:
    """Each transform's `Gain`: `base` maps task ids to the base reply's score, `transformed` each transform's
    name to its scores by task id (every task of `base`).

    One set of resamples, drawn over the tasks in id order, serves every transform, so the intervals depend
    neither on the order tasks finished in nor on which transforms were run, and they are paired across
    transforms.
    """
    import numpy as np  # deferred, as in scoring: only aggregation needs it

    ids = sorted(base)
    for name, scores in transformed.items():
        missing = [task for task in ids if task not in scores]
        if missing:
            raise DataError(f"transform {name}: no score for tasks {missing[:3]}")
    if not ids:
        return {}
    base_scores = np.asarray([base[task] for task in ids], dtype=np.float64)
    diffs = {
        name: np.asarray([scores[task] for task in ids], dtype=np.float64) - base_scores
        for name, scores in transformed.items()
    }
    resampled = Bootstrap(seed, n_bootstrap).means(*diffs.values()) if diffs else []
    out = {}
    for (name, diff), means in zip(diffs.items(), resampled, strict=True):
        interval = percentile_interval(means)
        assert interval is not None  # a mean of finite scores is finite in every resample
        out[name] = Gain(
            mean_gain=float(diff.mean()),
            ci95=interval,
            share_gained=float((diff > 0).mean()),
            n=len(ids),
        )
    return out


def verdict(name: str, gain: Gain) -> str:
    """One line saying whether the transform wins reward (from `MIN_VERDICT_TASKS` tasks up; below, that there are
    too few tasks for a verdict): its mean gain, interval and share of tasks gained."""
    low, high = gain.ci95
    figures = f"mean gain {gain.mean_gain:+.3f} [95% CI {low:+.3f}, {high:+.3f}], gained on {gain.share_gained:.0%}"
    if gain.n < MIN_VERDICT_TASKS:
        said = f"too few tasks for a verdict (it takes {MIN_VERDICT_TASKS})"
    elif low > 0:
        said = "HACKABLE: the grader rewards it"
    elif high < 0:
        said = "costs reward"
    else:
        said = "no gain shown"
    return f"{name}: {said}; {figures} of {gain.n} tasks"


def ordered(found: Mapping[str, Gain]) -> list[tuple[str, Gain]]:
    """The transforms worst first: the largest mean gain (what a policy would learn first) at the top."""
    return sorted(found.items(), key=lambda item: (-item[1].mean_gain, item[0]))
