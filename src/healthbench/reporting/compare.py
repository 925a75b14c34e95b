"""Comparing two graded runs task by task.

Two runs on the same tasks are compared on the tasks both graded, so each task is measured against itself and
task difficulty cancels out. A task's value in a run is the mean over its samples there (its repeats), and its
difference is B's value minus A's; the headline difference is the mean of the per-task differences, and its
interval a seeded percentile bootstrap that resamples tasks. Repeats of one task are not independent evidence:
they say how a task's score varies, not how the runs would differ on other tasks, so they are averaged within
their task, never resampled as pairs of their own. Run A is the first folder given, B the second.

An interval from a handful of tasks says little (the percentile bootstrap of a mean needs enough resampled units
to have a distribution at all: one task gives an interval of zero width), so a row of fewer than `MIN_MARKED`
paired tasks is never marked as a difference, whatever its interval.

What is clipped: each run's mean (`mean_a`, `mean_b`) is clipped to [0, 1], as metrics.json, the report and the
leaderboard clip theirs, so the same run shows the same figure everywhere. The per-task values and their
differences are not: `diff` is the mean of the unclipped per-task differences (and the interval is its interval),
because a difference of clipped means would hide how far below zero a run went; `mean_a_unclipped` and
`mean_b_unclipped` are the means it is the difference of, and `clipped` says when clipping changed one.

The headline is compared as each run scores it: per sample the `length_adjusted_score` when the run carries one
(or, for a run rescored after grading, the score adjusted with its run.json's settings), else the `score`. When
the two runs' headlines are not alike (one length-adjusted and the other not, or adjusted with other settings),
the result says so rather than mixing them silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from healthbench.data.tags import EXAMPLE_FAMILIES, UNSLICED_FAMILIES
from healthbench.errors import DataError, SettingsError
from healthbench.grading.bootstrap import percentile_interval, resample_means
from healthbench.grading.grader import GraderCalls
from healthbench.grading.scoring import LengthAdjustment
from healthbench.runs.folder import RESULTS, RunFolder
from healthbench.runs.outputs import BySide, Comparison, Headline, MetricDifference
from healthbench.runs.records import RunRecord, SampleRecord
from healthbench.runs.spec import SIDE_RUNS, LengthSpec

# Rows of fewer paired tasks than this get no significance mark.
MIN_MARKED = 10
HEADLINE: Final = "score"


def example_prefixes(records: Iterable[SampleRecord], metric_names: Iterable[str] = ()) -> list[str]:
    """The example-tag families a run is sliced by: those its records' `example_tags` carry (theme for
    HealthBench; use_case, type, difficulty and specialty for HealthBench Professional), in a fixed order.

    Results written before records carried `example_tags` are still sliced by theme when their metrics have it.
    """
    found = {tag.split(":", 1)[0] for record in records for tag in record.example_tags if ":" in tag}
    if not found and any(name.startswith("theme:") for name in metric_names):
        found.add("theme")
    known = len(EXAMPLE_FAMILIES)
    return sorted(
        found - UNSLICED_FAMILIES,
        key=lambda p: (EXAMPLE_FAMILIES.index(p) if p in EXAMPLE_FAMILIES else known, p),
    )


def _clip(value: float) -> float:
    return min(max(value, 0.0), 1.0)


def _headline_of(records: Sequence[SampleRecord], run: RunRecord | None) -> Headline:
    """Whether a run's headline is length-adjusted (its records carry `length_adjusted_score`, or its run.json
    records a `length_adjustment`), with those settings (None when not recorded)."""
    settings: LengthSpec | None = run.spec.length_adjustment if run is not None else None
    adjusted = settings is not None or any(record.length_adjusted_score is not None for record in records)
    return Headline(length_adjusted=adjusted, length_adjustment=settings)


def _words(headline: Headline) -> str:
    if not headline.length_adjusted:
        return "not length-adjusted"
    if headline.length_adjustment is None:
        return "length-adjusted, settings not recorded"
    return f"length-adjusted, {headline.length_adjustment.adjustment.describe()}"


def _mismatch(a: Headline, b: Headline) -> str | None:
    """A sentence saying how the two headlines differ, or None when they are alike."""
    if a == b:
        return None
    return (
        f"the runs' headlines differ: A's is {_words(a)}, B's is {_words(b)}; the score row sets one against "
        f"the other as each run scores it, and overall_score compares the unadjusted scores like with like"
    )


def grader_calls_mismatch(calls_a: str | None, calls_b: str | None) -> str | None:
    """A sentence when two runs' graders were called differently (per item and per reply), else None; a run
    whose run.json is missing says nothing."""
    if calls_a is None or calls_b is None or calls_a == calls_b:
        return None
    how = {"per-item": "one grader call per rubric item, the reference's", "per-reply": "one call per reply"}
    return (
        f"A was graded {calls_a} ({how.get(calls_a, calls_a)}), B {calls_b} ({how.get(calls_b, calls_b)}): part of "
        "B - A is the grading's, not the runs'; a per-reply score is not HealthBench's"
    )


def _headline_score(record: SampleRecord, adjustment: LengthAdjustment | None, side: str) -> float:
    """The sample's headline: its `length_adjusted_score`, else adjusted here from its reply with the run's
    settings (a run rescored after grading), else its `score`."""
    if record.length_adjusted_score is not None:
        return record.length_adjusted_score
    if adjustment is None:
        return record.score
    if record.response is None:
        where = f"run {side}: sample {record.prompt_id!r} repeat {record.repeat}"
        raise DataError(f"{where}: field response: needed to length-adjust its score, got None")
    return adjustment.adjust(record.score, record.response)


def _task_values(
    records: Sequence[SampleRecord], adjustment: LengthAdjustment | None, side: str
) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """Per task, the mean over its samples of each metric every one of them has (the headline as `score`), and
    its number of samples."""
    samples: dict[str, list[dict[str, float]]] = {}
    seen: set[tuple[str, int]] = set()
    for record in records:
        if record.key in seen:
            raise DataError(
                f"run {side}: sample {record.prompt_id!r} repeat {record.repeat} appears twice in its results.jsonl "
                "(is it a meta-eval run? compare takes runs of grade, eval or baseline)"
            )
        seen.add(record.key)
        values = dict(record.metrics) | {HEADLINE: _headline_score(record, adjustment, side)}
        samples.setdefault(record.prompt_id, []).append(values)
    means = {}
    for task, graded in samples.items():
        shared = set.intersection(*(set(values) for values in graded))
        means[task] = {name: sum(values[name] for values in graded) / len(graded) for name in shared}
    return means, {task: len(graded) for task, graded in samples.items()}


def task_headlines(records: Sequence[SampleRecord], run: RunRecord | None, side: str) -> dict[str, float]:
    """Each task's headline score as `compare` takes it (the mean over its samples), by task id; `side` names the
    run in an error."""
    means, _ = _task_values(records, _adjustment(run), side)
    return {task: values[HEADLINE] for task, values in means.items()}


def _compared_names(
    pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]], prefixes: Sequence[str]
) -> list[str]:
    families = (*(f"{p}:" for p in prefixes), "axis:")
    names: set[str] = set()
    for a, b in pairs:
        names.update(name for name in a.keys() & b.keys() if name.startswith(families))
    rank = {family: i for i, family in enumerate(families)}
    return ["overall_score", *sorted(names, key=lambda n: (rank[n.split(":", 1)[0] + ":"], n))]


def compare_runs(
    a: Sequence[SampleRecord],
    b: Sequence[SampleRecord],
    *,
    seed: int = 0,
    n_bootstrap: int = 1000,
    run_a: RunRecord | None = None,
    run_b: RunRecord | None = None,
    names: tuple[str, str] | None = None,
    unfinished: Sequence[str] = (),
) -> Comparison:
    """Compare run B to run A on the tasks both graded (a `Comparison`; `DataError` when they graded none
    alike); `run_a` and `run_b` are the runs' run.json, which say how a length-adjusted headline was adjusted,
    `names` what to call the runs (their folders), and `unfinished` a sentence per run that is not finished.

    The metrics are the headline `score` (when either run is length-adjusted), `overall_score`, each example-tag
    slice (`theme:*`; `use_case:*`, `type:*`, ... for HealthBench Professional) and each `axis:*` metric, each
    over the paired tasks where both runs have it. Tasks are taken in sorted order, so the result does not depend
    on the records' order.
    """
    import numpy as np  # deferred: numpy costs 0.5 s of CLI start-up, and only this function needs it

    if n_bootstrap < 1:
        raise SettingsError("`n_bootstrap` must be at least 1")
    headlines = BySide[Headline](a=_headline_of(a, run_a), b=_headline_of(b, run_b))
    adjustment_a, adjustment_b = (_adjustment(run) for run in (run_a, run_b))
    (tasks_a, counts_a), (tasks_b, counts_b) = _task_values(a, adjustment_a, "A"), _task_values(b, adjustment_b, "B")
    tasks = sorted(tasks_a.keys() & tasks_b.keys())
    if not tasks:
        raise DataError(
            f"no paired tasks to compare: A graded {len(tasks_a)} task{'s' * (len(tasks_a) != 1)}, B "
            f"{len(tasks_b)}, and none of them is the same task (are they runs of the same data?)"
        )
    pairs = [(tasks_a[task], tasks_b[task]) for task in tasks]
    adjusted = headlines.a.length_adjusted or headlines.b.length_adjusted
    metric_names = {name for ma, mb in pairs for name in (*ma, *mb)}
    prefixes = example_prefixes([*a, *b], metric_names)
    compared = ([HEADLINE] if adjusted else []) + _compared_names(pairs, prefixes)
    metrics: dict[str, MetricDifference] = {}
    for name in compared:
        values = [(ma[name], mb[name]) for ma, mb in pairs if name in ma and name in mb]
        if not values:
            continue
        array = np.asarray(values, dtype=np.float64)
        diffs = array[:, 1] - array[:, 0]
        # A fresh stream per metric: each interval depends only on its own tasks, not on which other metrics
        # happen to be present in the runs.
        interval = percentile_interval(resample_means(diffs, seed=seed, n_bootstrap=n_bootstrap))
        assert interval is not None  # a mean of finite differences is finite in every resample
        low, high = interval
        mean_a, mean_b = float(array[:, 0].mean()), float(array[:, 1].mean())
        metrics[name] = MetricDifference(
            n=len(diffs),
            mean_a=_clip(mean_a),
            mean_b=_clip(mean_b),
            diff=float(diffs.mean()),
            ci_low=low,
            ci_high=high,
            mean_a_unclipped=mean_a,
            mean_b_unclipped=mean_b,
            clipped=_clip(mean_a) != mean_a or _clip(mean_b) != mean_b,
            marked=len(diffs) >= MIN_MARKED and (low > 0 or high < 0),
        )
    calls = BySide[GraderCalls | None](
        a=run_a.spec.grader.calls if run_a else None, b=run_b.spec.grader.calls if run_b else None
    )
    return Comparison(
        a=names[0] if names else None,
        b=names[1] if names else None,
        grader_calls=calls,
        grader_calls_mismatch=grader_calls_mismatch(calls.a, calls.b),
        unfinished=list(unfinished),
        n_tasks=len(tasks),
        samples=BySide[int](a=sum(counts_a[t] for t in tasks), b=sum(counts_b[t] for t in tasks)),
        only_a=len(tasks_a) - len(tasks),
        only_b=len(tasks_b) - len(tasks),
        seed=seed,
        n_bootstrap=n_bootstrap,
        min_marked=MIN_MARKED,
        headline=HEADLINE if adjusted else "overall_score",
        headlines=headlines,
        headline_mismatch=_mismatch(headlines.a, headlines.b),
        metrics=metrics,
    )


def _adjustment(run: RunRecord | None) -> LengthAdjustment | None:
    """The run's length adjustment as run.json records it, for records that do not carry their adjusted score."""
    return None if run is None else run.spec.adjustment


def _read(path: Path, side: str) -> tuple[list[SampleRecord], RunRecord | None, str | None]:
    """A run folder's results, its run.json and a sentence when it is not a finished run; a DataError naming the
    folder for one that cannot be compared."""
    folder = RunFolder(path)
    run = folder.read_run()
    if run is not None and run.spec.command == "meta-eval":
        raise DataError(
            f"{path}: a meta-eval run grades the grader, not a model; compare takes runs of grade, eval or baseline, "
            "or two meta-eval runs"
        )
    if run is not None and run.spec.command == "probe":
        raise DataError(
            f"{path}: a probe grades rewritten replies beside each reply; compare takes runs of grade, eval or "
            "baseline (a probe's gains are in its probe.json)"
        )
    if run is not None and run.spec.command in SIDE_RUNS:
        raise DataError(f"{path}: {SIDE_RUNS[run.spec.command]}; compare takes runs of grade, eval or baseline")
    results = folder.read_results()
    if not results:
        raise DataError(f"{folder / RESULTS}: no results to compare")
    reason = folder.unfinished(run)
    said = None if reason is None else f"{side} ({path}) is {reason}: compared on the tasks it graded"
    return results, run, said


def compare_dirs(run_a: str | Path, run_b: str | Path, *, seed: int = 0, n_bootstrap: int = 1000) -> Comparison:
    """`compare_runs` on two run folders, A and B as named: their results.jsonl, and their run.json when
    present; a run that is not finished is compared on the tasks it graded, and the result says so."""
    (a, meta_a, said_a), (b, meta_b, said_b) = _read(Path(run_a), "A"), _read(Path(run_b), "B")
    return compare_runs(
        a,
        b,
        seed=seed,
        n_bootstrap=n_bootstrap,
        run_a=meta_a,
        run_b=meta_b,
        names=(str(run_a), str(run_b)),
        unfinished=[said for said in (said_a, said_b) if said],
    )


def format_comparison(result: Comparison) -> str:
    """A plain-text table of a `compare_runs` result; `*` marks a row whose interval excludes zero over at least
    `min_marked` tasks, `^` a row where clipping a mean to [0, 1] changed it."""
    names = "".join(f"{side.upper()}: {name}\n" for side, name in (("a", result.a), ("b", result.b)) if name)
    if result.grader_calls_mismatch:
        # The first line: a reader who reads nothing else must not take the difference for the models' alone.
        names = f"GRADER CALLS DIFFER: {result.grader_calls_mismatch}\n" + names
    names += "".join(f"UNFINISHED: {said}\n" for said in result.unfinished)
    samples = result.samples
    head = names + (
        f"{result.n_tasks} paired tasks ({samples.a} samples in A, {samples.b} in B); {result.only_a} "
        f"tasks only in A, {result.only_b} only in B (95% bootstrap interval of the mean per-task difference, "
        f"tasks resampled, {result.n_bootstrap} resamples, seed {result.seed})"
    )
    metrics = result.metrics
    if result.headline_mismatch:
        head += f"\nHEADLINE MISMATCH: {result.headline_mismatch}"
    elif result.headline == HEADLINE:
        head += f"\nheadline: the score row, in both runs {_words(result.headlines.a)}"
    width = max(len("metric"), *(len(name) for name in metrics))
    lines = [head, "", f"{'metric':<{width}}  {'tasks':>5}  {'mean A':>7}  {'mean B':>7}  {'B - A':>7}  95% interval"]
    for name, m in metrics.items():
        marker = (" *" if m.marked else "") + (" ^" if m.clipped else "")
        lines.append(
            f"{name:<{width}}  {m.n:>5}  {m.mean_a:>7.3f}  {m.mean_b:>7.3f}  {m.diff:>+7.3f}  "
            f"[{m.ci_low:+.3f}, {m.ci_high:+.3f}]{marker}"
        )
    clipped = any(m.clipped for m in metrics.values())
    lines += [
        f"* the interval excludes zero; rows of fewer than {result.min_marked} tasks are never marked",
        "Each task counts once (its repeats averaged). Means are clipped to [0, 1] as in metrics.json; B - A and its "
        "interval are of the unclipped per-task differences"
        + ("; ^ marks a row where clipping changed a mean, so B - A is not mean B - mean A." if clipped else "."),
    ]
    return "\n".join(lines) + "\n"
