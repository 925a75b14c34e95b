"""The one bootstrap: resamples drawn in chunks are the resamples drawn at once, series of one length share them,
the percentile interval is numpy's linear percentile over defined values, and no other module of src/ draws
random resamples of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from healthbench.grading.bootstrap import CHUNK, Bootstrap, percentile_interval, resample_means

SRC = Path(__file__).parents[1] / "src" / "healthbench"


def test_a_hand_computed_percentile_interval() -> None:
    # Five resampled means 0, 0.25, ..., 1: the 2.5th percentile sits a tenth of the way from 0 to 0.25 (position
    # 0.025 * 4 = 0.1), the 97.5th nine tenths of the way from 0.75 to 1 (position 3.9).
    assert percentile_interval(np.array([0.0, 0.25, 0.5, 0.75, 1.0])) == pytest.approx((0.025, 0.975))
    # An undefined resample (NaN: no pair in it) is left out; none defined gives no interval.
    assert percentile_interval(np.array([np.nan, 0.5, 0.5])) == (0.5, 0.5)
    assert percentile_interval(np.array([np.nan, np.inf])) is None
    assert percentile_interval(np.array([0.0, 1.0]), confidence=0.5) == pytest.approx((0.25, 0.75))


def test_a_hand_computed_resample_of_two_tasks() -> None:
    # Two tasks scoring 0 and 1: each resample of two draws has mean 0, 0.5 or 1, as the seeded draws say.
    rows = np.random.default_rng(7).integers(0, 2, size=(8, 2))
    means = resample_means([0.0, 1.0], seed=7, n_bootstrap=8)
    assert list(means) == [row.sum() / 2 for row in rows]
    assert set(means) <= {0.0, 0.5, 1.0}
    # One task gives a resample distribution of one point: an interval of zero width.
    assert percentile_interval(resample_means([0.4], seed=3, n_bootstrap=50)) == (0.4, 0.4)


def test_chunks_draw_the_resamples_drawn_at_once() -> None:
    n, count = 37, 2 * CHUNK + 17
    values = np.linspace(-1.0, 2.0, n)
    at_once = np.random.default_rng(11).integers(0, n, size=(count, n))
    (means,) = Bootstrap(11, count).means(values)
    assert np.array_equal(means, values[at_once].mean(axis=1))


def test_series_of_one_length_share_the_resamples_and_lengths_follow_in_turn() -> None:
    bootstrap = Bootstrap(5, 300)
    x = np.arange(10, dtype=np.float64)
    a, b = bootstrap.means(x, x + 1.0)
    assert np.allclose(b - a, 1.0)  # paired: the same rows, so the difference is exact
    (later,) = bootstrap.means(np.arange(4, dtype=np.float64))
    rng = np.random.default_rng(5)
    rng.integers(0, 10, size=(300, 10))
    assert np.array_equal(later, np.arange(4.0)[rng.integers(0, 4, size=(300, 4))].mean(axis=1))
    with pytest.raises(ValueError, match="one length"):
        Bootstrap().means(x, np.arange(3.0))


def test_sums_keep_the_shape_of_a_unit() -> None:
    counts = np.array([[[1.0, 0.0]], [[0.0, 2.0]]])  # two clusters, one rater, two counts
    sums = Bootstrap(2, 6).sums(counts)
    rows = np.random.default_rng(2).integers(0, 2, size=(6, 2))
    assert sums.shape == (6, 1, 2)
    assert [list(s[0]) for s in sums] == [[float((r == 0).sum()), 2.0 * float((r == 1).sum())] for r in rows]


def test_one_definition_of_the_bootstrap_in_src() -> None:
    drawing = sorted(
        str(path.relative_to(SRC)) for path in SRC.rglob("*.py") if "default_rng" in path.read_text(encoding="utf-8")
    )
    assert drawing == ["grading/bootstrap.py"]
