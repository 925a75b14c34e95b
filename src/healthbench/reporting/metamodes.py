"""Two meta-evaluations of one grader side by side, one graded per item and one per reply (or any two finished
meta-eval runs): macro F1 against the physicians with a bootstrap interval, and what each cost.

The interval is a percentile bootstrap over completions (a completion's rows are drawn together: one per-reply
call judges them all, so their verdicts are not independent). When both runs graded the same rows, the
difference B - A is measured on the same resamples (paired), so it is known more precisely than either figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from healthbench.errors import DataError
from healthbench.grading.agreement import MODEL_F1, macro_f1_resamples
from healthbench.grading.bootstrap import percentile_interval
from healthbench.reporting.compare import grader_calls_mismatch
from healthbench.runs.folder import RunFolder
from healthbench.runs.outputs import MetaComparison, MetaRunFigures
from healthbench.runs.records import MetaRecord, SideUsage, UsageRecord

# HealthBench's paper, Table 6: each grader's macro F1 against physicians on the meta-eval, graded per item.
PAPER_MACRO_F1 = {"gpt-4.1": 0.709, "o4-mini": 0.692, "o3": 0.681, "gpt-4.1-mini": 0.661, "gpt-4.1-nano": 0.580}


def meta_pair(folders: Sequence[RunFolder]) -> bool:
    """Whether the folders are all meta-eval runs (set side by side), rather than none of them (compared task by
    task); `DataError` for a mix, which nothing compares."""
    meta = [run is not None and run.spec.command == "meta-eval" for run in (folder.read_run() for folder in folders)]
    if any(meta) and not all(meta):
        named = next(folder for folder, is_meta in zip(folders, meta, strict=True) if is_meta)
        raise DataError(
            f"{named.path}: a meta-eval run grades the grader, not a model; compare takes runs of grade, eval or "
            "baseline, or two meta-eval runs"
        )
    return all(meta)


def _rows(folder: RunFolder) -> list[MetaRecord]:
    records = sorted(folder.read_meta_results(), key=lambda record: record.index)
    if not records:
        raise DataError(f"{folder.path}: no results")
    return records


def cluster_of(record: MetaRecord) -> str:
    """The completion a row belongs to: the unit a bootstrap over completions draws."""
    return f"{record.prompt_id}\0{record.completion_id}"


def _resamples(raters: Sequence[Sequence[MetaRecord]], seed: int, n_bootstrap: int) -> Any:
    """Macro F1 resamples of each run's verdicts on the first run's rows, clusters and labels."""
    rows = raters[0]
    verdicts = [[row.criteria_met for row in run] for run in raters]
    labels, clusters = [row.binary_labels for row in rows], [cluster_of(row) for row in rows]
    return macro_f1_resamples(verdicts, labels, clusters, seed=seed, n_bootstrap=n_bootstrap)


def side_by_side(folders: Sequence[RunFolder], *, seed: int = 0, n_bootstrap: int = 1000) -> MetaComparison:
    """The figures of finished meta-eval runs A and B (`DataError` for a folder that is not one), and B - A with
    its paired interval when both graded the same rows."""
    runs = []
    records = [_rows(folder) for folder in folders]
    for folder, rows in zip(folders, records, strict=True):
        metrics, run, usage = folder.require_metrics(), folder.require_run(), folder.read(UsageRecord)
        f1 = metrics.get(MODEL_F1)
        runs.append(
            MetaRunFigures(
                folder=str(folder.path),
                grader_model=run.spec.grader.model,
                grader_calls=run.spec.grader.calls,
                macro_f1=None if f1 is None else float(f1),
                interval=percentile_interval(_resamples([rows], seed, n_bootstrap)[:, 0]),
                rows=len(rows),
                completions=len({cluster_of(row) for row in rows}),
                usage=(usage.whole_run.grader if usage is not None else None) or SideUsage(),
            )
        )
    same = len(records) == 2 and [[(r.index, r.prompt_id, r.completion_id, r.rubric) for r in rows] for rows in records]
    if not same or same[0] != same[1]:
        return MetaComparison(runs=runs, paper_macro_f1=PAPER_MACRO_F1)
    both = _resamples(records, seed, n_bootstrap)
    a, b = runs[0].macro_f1, runs[1].macro_f1
    value = None if a is None or b is None else b - a
    return MetaComparison(
        runs=runs,
        difference=value,
        difference_interval=percentile_interval(both[:, 1] - both[:, 0]),
        paired=True,
        paper_macro_f1=PAPER_MACRO_F1,
    )


def _f1(value: float | None, interval: tuple[float, float] | None) -> str:
    if value is None:
        return "undefined"
    shown = f"{value:.4f}"
    return shown if interval is None else f"{shown} [{interval[0]:.4f}, {interval[1]:.4f}]"


def _money(value: float | None) -> str:
    return "no price" if value is None else f"${value:,.2f}"


def _per(value: float | None, count: int) -> str:
    return "" if value is None or not count else f" (${value / count:,.4f} per completion)"


def _calls(run: MetaRunFigures) -> str:
    return f"{run.usage.calls:,} ({run.usage.calls / max(run.completions, 1):.2f} per completion)"


def _prompt(run: MetaRunFigures) -> str:
    rate = 100 * (run.usage.cache_hit_rate or 0)
    return f"{run.usage.prompt_tokens:,} ({run.usage.cached_prompt_tokens:,}, {rate:.0f}%)"


def side_by_side_lines(figures: MetaComparison) -> list[str]:
    """The side-by-side figures as the command prints them: a line per figure, a column per run; first, when the
    runs' graders were called differently, a line that says so."""
    runs = figures.runs
    mismatch = grader_calls_mismatch(runs[0].grader_calls, runs[-1].grader_calls) if len(runs) > 1 else None
    rows = [
        ("", [f"{run.grader_calls} ({run.grader_model})" for run in runs]),
        ("macro F1 [95% interval]", [_f1(run.macro_f1, run.interval) for run in runs]),
        ("rows, completions", [f"{run.rows:,}, {run.completions:,}" for run in runs]),
        ("grader calls", [_calls(run) for run in runs]),
        ("prompt tokens (cached)", [_prompt(run) for run in runs]),
        ("output tokens", [f"{run.usage.completion_tokens:,}" for run in runs]),
        ("cost", [_money(run.usage.cost_usd) + _per(run.usage.cost_usd, run.completions) for run in runs]),
        ("saved by the prompt cache", [_money(run.usage.cache_saved_usd) for run in runs]),
    ]
    change = f"{runs[-1].grader_calls} - {runs[0].grader_calls} macro F1"
    width = max(len(label) for label in [change, *(label for label, _ in rows)]) + 2
    column = max(len(value) for _, values in rows for value in values) + 2
    lines = [f"GRADER CALLS DIFFER: {mismatch}"] if mismatch else []
    lines += [label.ljust(width) + "".join(value.ljust(column) for value in values).rstrip() for label, values in rows]
    if figures.paired:
        shown = _f1(figures.difference, figures.difference_interval)
        lines.append(f"{change.ljust(width)}{shown} (paired bootstrap over completions)")
    else:
        lines.append("(the runs graded different rows: no paired difference)")
    paper = ", ".join(f"{model} {value:.3f}" for model, value in PAPER_MACRO_F1.items())
    lines.append(f"HealthBench paper, Table 6 (per item, the full meta-eval): {paper}.")
    lines.append(
        "Per-reply grading is not the reference's: its agreement with physicians is what this meta-eval shows for "
        "your grader, and nothing more."
    )
    return lines
