"""The seeded bootstrap every figure with an interval is given by: pure, no I/O.

Units (tasks, samples, or clusters of meta-eval rows) are resampled with replacement, `n_bootstrap` times, from a
numpy generator seeded once; each resample is a row of `n` unit indices. Several series of one length are measured
on the same rows (`Bootstrap.means`), so their figures are paired and drawing them costs one stream of indices.
A `Bootstrap` keeps its generator: a caller that measures series of several lengths draws them one after another
from the one stream, in the order it asks for them, so its figures depend only on its seed and that order.

Indices are drawn in chunks of `CHUNK` rows, so a resample matrix is never held whole (1,000 x 29,511 indices of
the full meta-eval would take a quarter of a gigabyte). numpy's generator gives the same indices drawn in chunks
as drawn at once, so the chunk size changes no figure.

An interval is the percentile interval of the resampled statistic (`percentile_interval`): the 2.5th and 97.5th
percentiles for 95%, over the resamples where the statistic is defined.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from healthbench.errors import DataError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

N_BOOTSTRAP = 1000
CHUNK = 100
# The bootstrap's seed (numpy takes no negative one) and its number of resamples, as the settings and flags take
# them: each resample is a row of unit indices, so 10,000 of a 5,000-task run are 0.4 GB drawn at once.
Seed = Annotated[int, Field(ge=0)]
Bootstraps = Annotated[int, Field(ge=1, le=10_000)]
CONFIDENCE = 0.95


class Bootstrap:
    """A seeded stream of resamples: `n_bootstrap` rows of unit indices per call, drawn from one generator."""

    def __init__(self, seed: int = 0, n_bootstrap: int = N_BOOTSTRAP) -> None:
        import numpy as np  # deferred: numpy costs 0.2 s of CLI start-up, and only figures need it

        self.n_bootstrap = n_bootstrap
        self._rng = np.random.default_rng(seed)

    def _rows(self, n: int) -> Iterator[NDArray[np.int64]]:
        """The next `n_bootstrap` resamples of `n` units, in chunks of at most `CHUNK` rows."""
        for start in range(0, self.n_bootstrap, CHUNK):
            yield self._rng.integers(0, n, size=(min(CHUNK, self.n_bootstrap - start), n))

    def means(self, *series: NDArray[np.float64]) -> list[NDArray[np.float64]]:
        """Each series' mean in every resample (one array of `n_bootstrap` means per series), all series of one
        length measured on the same resamples."""
        import numpy as np

        n = _length(series)
        found: list[list[NDArray[np.float64]]] = [[] for _ in series]
        for rows in self._rows(n):
            for means, values in zip(found, series, strict=True):
                means.append(values[rows].mean(axis=1))
        return [np.concatenate(means) for means in found]

    def sums(self, units: NDArray[np.float64]) -> NDArray[np.float64]:
        """The sum over the units of each resample: `units` is indexed by unit along its first axis (counts per
        cluster, say), and the result by resample along its first, the rest of its shape kept."""
        import numpy as np

        return np.concatenate([units[rows].sum(axis=1) for rows in self._rows(_length([units]))])


def _length(series: Sequence[NDArray[np.float64]]) -> int:
    lengths = {len(values) for values in series}
    if len(lengths) != 1 or 0 in lengths:
        raise DataError(f"the bootstrap takes series of one length, at least 1, got lengths {sorted(lengths)}")
    (n,) = lengths
    return n


def resample_means(
    values: Sequence[float] | NDArray[np.float64], *, seed: int = 0, n_bootstrap: int = N_BOOTSTRAP
) -> NDArray[np.float64]:
    """The mean of `values` in each of `n_bootstrap` seeded resamples of them."""
    import numpy as np

    (means,) = Bootstrap(seed, n_bootstrap).means(np.asarray(values, dtype=np.float64))
    return means


def percentile_interval(resampled: NDArray[np.float64], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The percentile interval of a resampled statistic at `confidence` (0.95: the 2.5th and 97.5th
    percentiles), over the resamples where it is defined (finite); None when it is defined in none."""
    import numpy as np

    finite = resampled[np.isfinite(resampled)]
    if not len(finite):
        return None
    # Rounded: 50 * (1 - 0.95) is 2.500000000000002 in floating point, and the percentile of 2.5 is meant.
    tail = round(50 * (1 - confidence), 12)
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return float(low), float(high)
