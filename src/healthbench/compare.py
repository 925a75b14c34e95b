"""Comparing two graded runs sample by sample.

Two runs on the same tasks are compared on paired samples, keyed by (prompt_id, repeat), so each task is
measured against itself and task difficulty cancels out. The interval is a percentile bootstrap over pairs
of the mean difference B - A; per-task values are not clipped, unlike the headline aggregates, because a
difference of clipped means would hide how far below zero a run went.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .runner import RESULTS

# Only these metrics are compared: the overall score and the two tag families every task carries.
COMPARED_PREFIXES = ("theme:", "axis:")

Key = tuple[str, int]


def load_results(out_dir: str | Path) -> list[dict[str, Any]]:
    """The records of `out_dir/results.jsonl`, in file order.

    Lines are split on "\\n" only: replies may contain U+2028, which `str.splitlines` would split on.
    A line that is not a JSON object (one torn by a crash mid-write) is skipped, as a resumed run does.
    """
    records: list[dict[str, Any]] = []
    with (Path(out_dir) / RESULTS).open(encoding="utf-8", newline="\n") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def _by_key(records: Sequence[Mapping[str, Any]], side: str) -> dict[Key, Mapping[str, Any]]:
    keyed: dict[Key, Mapping[str, Any]] = {}
    for record in records:
        key = (str(record["prompt_id"]), int(record.get("repeat", 0)))
        if key in keyed:
            raise ValueError(f"run {side}: sample {key[0]!r} repeat {key[1]} appears twice")
        keyed[key] = record
    return keyed


def _compared_names(metric_pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]]) -> list[str]:
    names: set[str] = set()
    for a, b in metric_pairs:
        names.update(name for name in a.keys() & b.keys() if name.startswith(COMPARED_PREFIXES))
    return ["overall_score", *sorted(names, key=lambda n: (not n.startswith("theme:"), n))]


def compare_runs(
    a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], *, seed: int = 0, n_bootstrap: int = 1000
) -> dict[str, Any]:
    """Compare run B to run A on samples paired by (prompt_id, repeat or 0).

    Returns `n_pairs`, `only_a`, `only_b` (unpaired sample counts), `seed`, `n_bootstrap`, and `metrics`:
    for `overall_score` and each `theme:*` and `axis:*` metric, over the pairs where both samples have it,
    `{n, mean_a, mean_b, diff, ci_low, ci_high}` with `diff` the mean of B - A and [ci_low, ci_high] its 95%
    percentile bootstrap interval (pairs resampled with replacement). Pairs are taken in key order, so the
    result does not depend on the order of the records.
    """
    import numpy as np  # deferred: numpy costs 0.5 s of CLI start-up, and only this function needs it

    if n_bootstrap < 1:
        raise ValueError("n_bootstrap must be at least 1")
    keyed_a, keyed_b = _by_key(a, "A"), _by_key(b, "B")
    keys = sorted(keyed_a.keys() & keyed_b.keys())
    pairs = [(keyed_a[key], keyed_b[key]) for key in keys]
    metric_pairs = [(ra.get("metrics", {}), rb.get("metrics", {})) for ra, rb in pairs]
    metrics: dict[str, dict[str, float | int]] = {}
    for name in _compared_names(metric_pairs):
        values = [(ma[name], mb[name]) for ma, mb in metric_pairs if name in ma and name in mb]
        if not values:
            continue
        array = np.asarray(values, dtype=np.float64)
        diffs = array[:, 1] - array[:, 0]
        # A fresh generator per metric: each interval depends only on its own pairs, not on which other
        # metrics happen to be present in the runs.
        rng = np.random.default_rng(seed)
        means = diffs[rng.integers(0, len(diffs), size=(n_bootstrap, len(diffs)))].mean(axis=1)
        low, high = np.percentile(means, [2.5, 97.5])
        metrics[name] = {
            "n": len(diffs),
            "mean_a": float(array[:, 0].mean()),
            "mean_b": float(array[:, 1].mean()),
            "diff": float(diffs.mean()),
            "ci_low": float(low),
            "ci_high": float(high),
        }
    return {
        "n_pairs": len(pairs),
        "only_a": len(keyed_a) - len(pairs),
        "only_b": len(keyed_b) - len(pairs),
        "seed": seed,
        "n_bootstrap": n_bootstrap,
        "metrics": metrics,
    }


def format_comparison(result: Mapping[str, Any]) -> str:
    """A plain-text table of a `compare_runs` result; `*` marks an interval that excludes zero."""
    head = (
        f"{result['n_pairs']} paired samples; {result['only_a']} only in A, {result['only_b']} only in B "
        f"(95% bootstrap interval of the mean difference, {result['n_bootstrap']} resamples, seed {result['seed']})"
    )
    metrics: Mapping[str, Mapping[str, float]] = result["metrics"]
    if not metrics:
        return f"{head}\nno paired samples to compare\n"
    width = max(len("metric"), *(len(name) for name in metrics))
    lines = [head, "", f"{'metric':<{width}}  {'n':>5}  {'mean A':>7}  {'mean B':>7}  {'B - A':>7}  95% interval"]
    for name, m in metrics.items():
        marker = " *" if m["ci_low"] > 0 or m["ci_high"] < 0 else ""
        lines.append(
            f"{name:<{width}}  {m['n']:>5}  {m['mean_a']:>7.3f}  {m['mean_b']:>7.3f}  {m['diff']:>+7.3f}  "
            f"[{m['ci_low']:+.3f}, {m['ci_high']:+.3f}]{marker}"
        )
    lines.append("* the interval excludes zero")
    return "\n".join(lines) + "\n"
