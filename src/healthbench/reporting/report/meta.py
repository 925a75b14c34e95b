"""The meta-evaluation's report: the grader's macro F1 beside the physicians', by theme and by consensus
criterion, as one self-contained, autoescaped page."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from healthbench.files import write_atomic
from healthbench.reporting.pages import template
from healthbench.reporting.report.common import settings
from healthbench.reporting.report.spending import spending
from healthbench.reporting.report.status import counts, status
from healthbench.runs.folder import REPORT, RunFolder
from healthbench.runs.records import (
    AgreementRecord,
    FailureRecord,
    GroupAgreement,
    MetaRecord,
    Metrics,
    RunRecord,
    UsageRecord,
)


def _figure(value: Any) -> str:
    return "" if value is None else f"{float(value):.3f}"


def _meta_group(figures: GroupAgreement) -> dict[str, Any]:
    """One table row: figures formatted, and the range bar as markup built from floats only."""
    model = figures.model_f1
    low, mid, high = figures.physician_min, figures.physician_median, figures.physician_max
    bar, shown = "", ""
    if low is not None and mid is not None and high is not None:
        bar = f'<i style="left:{100 * low:.1f}%;width:{100 * (high - low):.1f}%"></i>'
        bar += f'<u style="left:{100 * mid:.1f}%"></u>'
        shown = f"{low:.3f} / {mid:.3f} / {high:.3f} ({figures.physicians})"
    if model is not None:
        bar += f'<b style="left:calc({100 * model:.1f}% - 1px)"></b>'
    return {
        "group": figures.group,
        "rows": figures.rows,
        "pairs": figures.pairs,
        "model_f1": _figure(model),
        "physicians_pooled_f1": _figure(figures.physicians_pooled_f1),
        "spread": shown,
        "bar": bar,
    }


def render_meta_report(
    metrics: Metrics | None,
    agreement: AgreementRecord | None,
    run: RunRecord | None,
    results: Sequence[MetaRecord] = (),
    failures: Sequence[FailureRecord] = (),
    spent: UsageRecord | None = None,
) -> str:
    """The report of a meta-eval run (metrics.json, agreement.json, run.json, the records of results.jsonl
    and failures.jsonl, usage.json; each may be empty) as one self-contained, autoescaped HTML page; a run
    that is not finished says what is missing and lists the rows that could not be graded."""
    notes = []
    state = status(run, metrics, results, counts(run, results), failures, unit="rows")
    metrics = metrics or {}
    if metrics and "score" not in metrics:
        notes.append("The grader's macro F1 is undefined: it gave the same verdict on every row.")
    pooled = [
        (f"{metric} {cls}", *(_figure(metrics.get(f"pairwise_{who}_{metric}_{cls}")) for who in ("model", "physician")))
        for metric in ("precision", "recall", "f1")
        for cls in ("pos", "neg", "balanced")
    ]
    tables = [
        (title, column, [_meta_group(f) for f in groups])
        for title, column, groups in (
            ("By theme", "theme", [] if agreement is None else agreement.by_theme),
            ("By consensus criterion", "category", [] if agreement is None else agreement.by_category),
        )
    ]
    return template("healthbench.reporting.report", "meta.html.j2").render(
        grader="unknown" if run is None else run.spec.grader.model,
        per_reply=run is not None and not run.spec.grader.official_calls,
        score=_figure(metrics.get("score")) or "undefined",
        physicians=_figure(metrics.get("pairwise_physician_f1_balanced")) or "undefined",
        rows=metrics.get("score:n_samples", len(results)),
        notes=notes,
        state=state,
        tables=tables,
        pooled=pooled,
        spending=spending(spent, run, results),
        settings=settings(run),
    )


def write_meta_report(out_dir: Path) -> Path:
    """Render `out_dir/report.html` of a meta-eval run from the files of its folder."""
    folder = RunFolder(out_dir)
    html = render_meta_report(
        folder.read_metrics(),
        folder.read(AgreementRecord),
        folder.read_run(),
        folder.read_meta_results(),
        folder.read_failures(),
        folder.read(UsageRecord),
    )
    return write_atomic(folder / REPORT, html)
