"""Comparing two graded runs sample by sample.

Two runs on the same tasks are compared on paired samples, keyed by (prompt_id, repeat), so each task is
measured against itself and task difficulty cancels out. Run A is the first folder given, B the second; the
result names both. The interval is a percentile bootstrap over pairs of the mean difference B - A.

What is clipped: each run's mean (`mean_a`, `mean_b`) is clipped to [0, 1], as metrics.json, the report and
the leaderboard clip theirs, so the same run shows the same figure everywhere. The per-task values and their
differences are not: `diff` is the mean of the unclipped per-task differences B - A (and the interval is
its interval), because a difference of clipped means would hide how far below zero a run went. Where
clipping changed a mean, `diff` is not `mean_b - mean_a`; `mean_a_unclipped` and `mean_b_unclipped` are the
means it is the difference of, and `clipped` says so.

The headline is compared as each run scores it: per task the `length_adjusted_score` when the run carries
one (or, for a run rescored after grading, the score adjusted with its run.json's settings), else the
`score`. When the two runs' headlines are not alike (one length-adjusted and the other not,
or adjusted with other settings), the result says so rather than mixing them silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from healthbench.data.tags import EXAMPLE_FAMILIES, UNSLICED_FAMILIES
from healthbench.errors import DataError
from healthbench.grading.scoring import LengthAdjustment
from healthbench.runs.folder import RESULTS, RunFolder
from healthbench.runs.records import check_results

ADJUSTED = "length_adjusted_score"

Key = tuple[str, int]


def example_prefixes(records: Iterable[Mapping[str, Any]], metric_names: Iterable[str] = ()) -> list[str]:
    """The example-tag families a run is sliced by: those its records' `example_tags` carry (theme for
    HealthBench; use_case, type, difficulty and specialty for HealthBench Professional), in a fixed order.

    Results written before records carried `example_tags` are still sliced by theme when their metrics have it.
    """
    found = {
        tag.split(":", 1)[0]
        for record in records
        for tag in record.get("example_tags") or []
        if isinstance(tag, str) and ":" in tag
    }
    if not found and any(name.startswith("theme:") for name in metric_names):
        found.add("theme")
    known = len(EXAMPLE_FAMILIES)
    return sorted(
        found - UNSLICED_FAMILIES,
        key=lambda p: (EXAMPLE_FAMILIES.index(p) if p in EXAMPLE_FAMILIES else known, p),
    )


def _clip(value: float) -> float:
    return min(max(value, 0.0), 1.0)


def _by_key(records: Sequence[Mapping[str, Any]], side: str) -> dict[Key, Mapping[str, Any]]:
    keyed: dict[Key, Mapping[str, Any]] = {}
    for record in records:
        key = (str(record["prompt_id"]), int(record.get("repeat", 0)))
        if key in keyed:
            raise DataError(
                f"run {side}: sample {key[0]!r} repeat {key[1]} appears twice in its results.jsonl (is it a "
                "meta-eval run? compare takes runs of grade, eval or baseline)"
            )
        keyed[key] = record
    return keyed


def _compared_names(
    metric_pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]], prefixes: Sequence[str]
) -> list[str]:
    families = (*(f"{p}:" for p in prefixes), "axis:")
    names: set[str] = set()
    for a, b in metric_pairs:
        names.update(name for name in a.keys() & b.keys() if name.startswith(families))
    rank = {family: i for i, family in enumerate(families)}
    return ["overall_score", *sorted(names, key=lambda n: (rank[n.split(":", 1)[0] + ":"], n))]


def _headline_of(
    records: Sequence[Mapping[str, Any]], run: Mapping[str, Any] | None, side: str
) -> tuple[dict[str, Any], LengthAdjustment | None]:
    """Whether a run's headline is length-adjusted (its records carry `length_adjusted_score`, or its
    run.json records a `length_adjustment`), with those settings (None when not recorded), and the settings
    as a `LengthAdjustment` for records that do not carry their adjusted score."""
    settings = (run or {}).get("length_adjustment")
    try:
        adjustment = None if settings is None else LengthAdjustment.from_dict(settings)
    except ValueError as exc:
        raise DataError(f"run {side}: run.json: field length_adjustment: {exc}") from None
    adjusted = adjustment is not None or any(ADJUSTED in record for record in records)
    return {"length_adjusted": adjusted, "length_adjustment": settings}, adjustment


def _words(headline: Mapping[str, Any]) -> str:
    if not headline["length_adjusted"]:
        return "not length-adjusted"
    settings = headline["length_adjustment"]
    if settings is None:
        return "length-adjusted, settings not recorded"
    try:
        return f"length-adjusted, {LengthAdjustment.from_dict(settings).describe()}"
    except ValueError:
        return f"length-adjusted, unreadable settings {settings!r}"


def _mismatch(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """A sentence saying how the two headlines differ, or None when they are alike."""
    if a == b:
        return None
    return (
        f"the runs' headlines differ: A's is {_words(a)}, B's is {_words(b)}; the score row sets one against "
        f"the other as each run scores it, and overall_score compares the unadjusted scores like with like"
    )


def _headline_score(record: Mapping[str, Any], adjustment: LengthAdjustment | None, side: str) -> float:
    """The task's headline: its `length_adjusted_score`, else adjusted here from its reply with the run's
    settings (a run rescored after grading), else its `score`."""
    if ADJUSTED in record:
        return float(record[ADJUSTED])
    if adjustment is None:
        return float(record["score"])
    response = record.get("response")
    if not isinstance(response, str):
        where = f"run {side}: sample {record['prompt_id']!r} repeat {record.get('repeat', 0)}"
        raise DataError(f"{where}: field response: needed to length-adjust its score, got {response!r}")
    return adjustment.adjust(float(record["score"]), response)


def compare_runs(
    a: Sequence[Mapping[str, Any]],
    b: Sequence[Mapping[str, Any]],
    *,
    seed: int = 0,
    n_bootstrap: int = 1000,
    run_a: Mapping[str, Any] | None = None,
    run_b: Mapping[str, Any] | None = None,
    names: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Compare run B to run A on samples paired by (prompt_id, repeat or 0); `run_a` and `run_b` are the
    runs' run.json, which say how a length-adjusted headline was adjusted, and `names` what to call the runs
    (their folders).

    Returns `a` and `b` (the runs' names, or None), `n_pairs`, `only_a`, `only_b` (unpaired sample counts),
    `seed`, `n_bootstrap`, `headline` (the
    metric that is the headline: `score` when either run is length-adjusted, else `overall_score`),
    `headlines` (per run, `length_adjusted` and its `length_adjustment` settings), `headline_mismatch` (None,
    or a sentence saying how the two headlines differ), and `metrics`: for the headline `score` (per task
    the `length_adjusted_score` where a run carries one, else the score adjusted with the run's
    `length_adjustment` where it has one, else the `score`), `overall_score`, each
    example-tag slice (`theme:*`; `use_case:*`, `type:*`, ... for HealthBench Professional) and each
    `axis:*` metric, over the pairs where both samples have it, `{n, mean_a, mean_b, diff, ci_low, ci_high,
    mean_a_unclipped, mean_b_unclipped, clipped}`: each run's mean clipped to [0, 1] as metrics.json clips it,
    `diff` the mean of the unclipped per-task differences B - A and [ci_low, ci_high] its 95% percentile
    bootstrap interval (pairs resampled with replacement), and `clipped` whether clipping changed either
    mean. Pairs are taken in key order, so the result does not depend on the order of the records.
    """
    import numpy as np  # deferred: numpy costs 0.5 s of CLI start-up, and only this function needs it

    if n_bootstrap < 1:
        raise ValueError("n_bootstrap must be at least 1")
    keyed_a, keyed_b = _by_key(a, "A"), _by_key(b, "B")
    keys = sorted(keyed_a.keys() & keyed_b.keys())
    pairs = [(keyed_a[key], keyed_b[key]) for key in keys]
    (headline_a, adjustment_a), (headline_b, adjustment_b) = _headline_of(a, run_a, "A"), _headline_of(b, run_b, "B")
    headlines = {"a": headline_a, "b": headline_b}
    adjusted = headline_a["length_adjusted"] or headline_b["length_adjusted"]
    metric_pairs = [(ra.get("metrics", {}), rb.get("metrics", {})) for ra, rb in pairs]
    metric_names = {name for ma, mb in metric_pairs for name in (*ma, *mb)}
    prefixes = example_prefixes([r for pair in pairs for r in pair], metric_names)
    series: list[tuple[str, list[tuple[float, float]]]] = []
    if adjusted:
        scores = [(_headline_score(ra, adjustment_a, "A"), _headline_score(rb, adjustment_b, "B")) for ra, rb in pairs]
        series.append(("score", scores))
    series += [
        (name, [(ma[name], mb[name]) for ma, mb in metric_pairs if name in ma and name in mb])
        for name in _compared_names(metric_pairs, prefixes)
    ]
    metrics: dict[str, dict[str, float | int]] = {}
    for name, values in series:
        if not values:
            continue
        array = np.asarray(values, dtype=np.float64)
        diffs = array[:, 1] - array[:, 0]
        # A fresh generator per metric: each interval depends only on its own pairs, not on which other
        # metrics happen to be present in the runs.
        rng = np.random.default_rng(seed)
        means = diffs[rng.integers(0, len(diffs), size=(n_bootstrap, len(diffs)))].mean(axis=1)
        low, high = np.percentile(means, [2.5, 97.5])
        mean_a, mean_b = float(array[:, 0].mean()), float(array[:, 1].mean())
        metrics[name] = {
            "n": len(diffs),
            "mean_a": _clip(mean_a),
            "mean_b": _clip(mean_b),
            "diff": float(diffs.mean()),
            "ci_low": float(low),
            "ci_high": float(high),
            "mean_a_unclipped": mean_a,
            "mean_b_unclipped": mean_b,
            "clipped": _clip(mean_a) != mean_a or _clip(mean_b) != mean_b,
        }
    return {
        "a": names[0] if names else None,
        "b": names[1] if names else None,
        "n_pairs": len(pairs),
        "only_a": len(keyed_a) - len(pairs),
        "only_b": len(keyed_b) - len(pairs),
        "seed": seed,
        "n_bootstrap": n_bootstrap,
        "headline": "score" if adjusted else "overall_score",
        "headlines": headlines,
        "headline_mismatch": _mismatch(headlines["a"], headlines["b"]),
        "metrics": metrics,
    }


def _read(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A run folder's results and run.json; a DataError naming the folder for one that cannot be compared."""
    folder = RunFolder(path)
    run = folder.read_run()
    if run.get("command") == "meta-eval":
        raise DataError(
            f"{path}: a meta-eval run grades the grader, not a model; compare takes runs of grade, eval or baseline"
        )
    results = folder.read_results()
    if not results:
        raise DataError(f"{folder / RESULTS}: no results to compare")
    check_results(results, folder / RESULTS)
    return results, run


def compare_dirs(run_a: str | Path, run_b: str | Path, *, seed: int = 0, n_bootstrap: int = 1000) -> dict[str, Any]:
    """`compare_runs` on two run folders, A and B as named: their results.jsonl, and their run.json when
    present."""
    (a, meta_a), (b, meta_b) = _read(Path(run_a)), _read(Path(run_b))
    names = (str(run_a), str(run_b))
    return compare_runs(a, b, seed=seed, n_bootstrap=n_bootstrap, run_a=meta_a, run_b=meta_b, names=names)


def format_comparison(result: Mapping[str, Any]) -> str:
    """A plain-text table of a `compare_runs` result; `*` marks an interval that excludes zero, `^` a row where
    clipping a mean to [0, 1] changed it."""
    names = "".join(f"{side.upper()}: {result[side]}\n" for side in ("a", "b") if result.get(side))
    head = names + (
        f"{result['n_pairs']} paired samples; {result['only_a']} only in A, {result['only_b']} only in B "
        f"(95% bootstrap interval of the mean difference, {result['n_bootstrap']} resamples, seed {result['seed']})"
    )
    metrics: Mapping[str, Mapping[str, float]] = result["metrics"]
    if not metrics:
        return f"{head}\nno paired samples to compare\n"
    headlines = result.get("headlines") or {}
    mismatch = result.get("headline_mismatch")
    if mismatch:
        head += f"\nHEADLINE MISMATCH: {mismatch}"
    elif result.get("headline") == "score":
        head += f"\nheadline: the score row, in both runs {_words(headlines['a'])}"
    width = max(len("metric"), *(len(name) for name in metrics))
    lines = [head, "", f"{'metric':<{width}}  {'n':>5}  {'mean A':>7}  {'mean B':>7}  {'B - A':>7}  95% interval"]
    for name, m in metrics.items():
        marker = (" *" if m["ci_low"] > 0 or m["ci_high"] < 0 else "") + (" ^" if m.get("clipped") else "")
        lines.append(
            f"{name:<{width}}  {m['n']:>5}  {m['mean_a']:>7.3f}  {m['mean_b']:>7.3f}  {m['diff']:>+7.3f}  "
            f"[{m['ci_low']:+.3f}, {m['ci_high']:+.3f}]{marker}"
        )
    clipped = any(m.get("clipped") for m in metrics.values())
    lines += [
        "* the interval excludes zero",
        "Means are clipped to [0, 1] as in metrics.json; B - A and its interval are of the unclipped per-task "
        "differences"
        + ("; ^ marks a row where clipping changed a mean, so B - A is not mean B - mean A." if clipped else "."),
    ]
    return "\n".join(lines) + "\n"
