"""The report of one graded run: the headline (and, when length-adjusted, the unadjusted score beside it),
whether the run is HealthBench Professional's official configuration, spending, charts, the metric table,
run settings and the per-task drill-down, rendered from report.html.j2."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from healthbench.errors import DataError
from healthbench.files import write_atomic
from healthbench.grading.aggregate import aggregate_samples
from healthbench.grading.scoring import LENGTH_ADJUSTED, LengthAdjustment
from healthbench.reporting.compare import example_prefixes
from healthbench.reporting.pages import template
from healthbench.reporting.report.charts import charts, interval, metric_rows, worst_curve
from healthbench.reporting.report.common import settings
from healthbench.reporting.report.spending import spending
from healthbench.reporting.report.status import counts, status
from healthbench.reporting.report.tasks import task
from healthbench.runs.folder import REPORT, RESULTS, RunFolder
from healthbench.runs.policy import REFUSED_REPLY
from healthbench.runs.records import FailureRecord, Metrics, RunRecord, SampleRecord, UsageRecord
from healthbench.runs.spec import LengthSpec

if TYPE_CHECKING:
    from jinja2 import Template


@dataclass(frozen=True)
class Figure:
    """A clipped mean as the page shows it: value, bootstrap std, 95% interval and sample count."""

    value: str | None
    std: str | None
    interval: str | None
    n: int | None


def _figure(metrics: Mapping[str, float | int], name: str) -> Figure:
    value, std, n = (metrics.get(f"{name}{suffix}") for suffix in ("", ":bootstrap_std", ":n_samples"))
    low_high = interval(float(value), float(std)) if value is not None and std is not None else None
    return Figure(
        value=None if value is None else f"{float(value):.3f}",
        std=None if std is None else f"{float(std):.4f}",
        interval=None if low_high is None else f"[{low_high[0]:.3f}, {low_high[1]:.3f}]",
        n=None if n is None else int(n),
    )


def _describe(adjustment: LengthAdjustment | None) -> str:
    return "none" if adjustment is None else adjustment.describe()


@dataclass(frozen=True)
class Rescored:
    """A run rescored by `healthbench report` with other length-adjustment settings than it was graded with."""

    graded_with: LengthAdjustment | None


def _template() -> Template:
    return template("healthbench.reporting.report", "report.html.j2")


def render_report(
    metrics: Metrics | None,
    results: Sequence[SampleRecord],
    run: RunRecord | None,
    spent: UsageRecord | None = None,
    failures: Sequence[FailureRecord] = (),
    rescored: Rescored | None = None,
) -> str:
    """The report of one run as a self-contained HTML document.

    `metrics` is metrics.json (None for an incomplete run), `results` the records of results.jsonl in any order,
    `run` run.json, `spent` usage.json, `failures` the records of failures.jsonl; `rescored` says the run was
    rescored with the length adjustment its `run` now records. The headline is length-adjusted when metrics.json
    has the adjusted score (or, without metrics, when run.json records a length adjustment). A run that is not
    finished says what is missing and lists its failures.
    """
    notes: list[str] = []
    spec = run.spec if run is not None else None
    adjustment = spec.adjustment if spec is not None else None
    shown = metrics or {}
    adjusted = LENGTH_ADJUSTED in shown or (not shown and adjustment is not None)
    headline = _figure(shown, "score") if "score" in shown else _figure(shown, "overall_score")
    tally = counts(run, results)
    state = status(run, metrics, results, tally, failures, unit="samples" if tally.repeats > 1 else "tasks")
    if headline.n is not None and headline.n != len(results):
        notes.append(f"metrics.json covers {headline.n} samples but results.jsonl holds {len(results)}.")
    if shown and not adjusted and adjustment is not None:
        notes.append(
            f"run.json records a length adjustment ({adjustment.describe()}) but metrics.json has no "
            "length-adjusted score: the headline is the unadjusted score."
        )
    if rescored is not None:
        notes.append(
            f"Rescored by `healthbench report` with length adjustment {_describe(adjustment)}; the run "
            f"was graded with {_describe(rescored.graded_with)}."
        )
    if adjusted:
        caption = "headline: length-adjusted score, " + (
            adjustment.describe() if adjustment is not None else "settings not recorded in run.json"
        )
    else:
        caption = "headline: score, not length-adjusted"
    prefixes = example_prefixes(results, shown)
    ordered = sorted(results, key=lambda r: r.key)
    tasks = [
        task(
            i,
            record,
            prefix=prefixes[0] if prefixes else None,
            adjustment=adjustment,
            adjusted_headline=adjusted,
            repeat=tally.repeat,
        )
        for i, record in enumerate(ordered)
    ]
    grader_models = sorted({r.grader_model for r in results if r.grader_model})
    policy_models = sorted({r.policy_model for r in results if r.policy_model})
    official = spec.official if spec is not None else None
    return _template().render(
        headline=headline,
        caption=caption,
        adjusted=adjusted,
        unadjusted=_figure(shown, "overall_score") if adjusted else None,
        official=None if official is None else official.configuration,
        differences=[] if official is None else [str(d) for d in official.differences],
        counts=tally,
        state=state,
        grader_model=spec.grader.model if spec is not None else ", ".join(grader_models) or "unknown",
        policy_model=spec.policy.model if spec is not None and spec.policy else ", ".join(policy_models) or None,
        split=None if spec is None else spec.data.split,
        template_sha256=spec.grader.template_sha256 if spec is not None else None,
        grader_calls=None if spec is None else spec.grader.calls,
        per_reply=spec is not None and not spec.grader.official_calls,
        prompt_cache_key=None if spec is None else spec.grader.prompt_cache_key,
        spending=spending(spent, run, results),
        notes=notes,
        charts=charts(shown, prefixes),
        curve=worst_curve(shown),
        refused=sum(1 for record in results if record.policy_error is not None),
        refused_reply=REFUSED_REPLY,
        suspect=sum(1 for record in results if record.suspect),
        suspect_rules=sorted(Counter(rule for record in results for rule in record.suspect).items()),
        metric_rows=metric_rows(shown, prefixes),
        settings=settings(run),
        tasks=tasks,
        slice_name=prefixes[0].replace("_", " ") if prefixes else "theme",
        slices=sorted({t.slice for t in tasks if t.slice}),
    )


def write_report(out_dir: Path) -> Path:
    """Render `out_dir/report.html` from the run's files and return its path.

    results.jsonl is required; metrics.json and run.json may be absent (an incomplete run). The page is
    written to a temporary file and renamed, so a reader never sees half of it.
    """
    folder = RunFolder(out_dir)
    html = render_report(
        folder.read_metrics(),
        folder.read_results(),
        folder.read_run(),
        folder.read(UsageRecord),
        folder.read_failures(),
    )
    return write_atomic(folder / REPORT, html)


def rebuild(out: Path, *, seed: int, length_adjustment: LengthAdjustment | None) -> dict[str, float | int]:
    """Re-aggregate `out/results.jsonl` into `out/metrics.json` (with `length_adjustment`, the headline is
    the length-adjusted score) and rewrite `out/report.html`; returns the metrics.

    run.json is left as it is; when the settings differ from those it records, the page says so and
    describes the run (and whether a Professional run is still in its official configuration) with the
    settings used.
    """
    folder = RunFolder(out)
    run = folder.require_run()
    results = folder.read_results()
    if not results:
        raise DataError(f"{folder / RESULTS}: no results")
    metrics = aggregate_samples(
        results, seed=seed, length_adjustment=length_adjustment, model_samples=run.spec.samples_the_model
    )
    folder.write_metrics(metrics)
    rescored = None
    if run.spec.adjustment != length_adjustment:
        rescored = Rescored(run.spec.adjustment)
        official = None if run.spec.official is None else run.spec.official.rescored_with(length_adjustment)
        spec = run.spec.model_copy(update={"length_adjustment": LengthSpec.of(length_adjustment), "official": official})
        run = run.model_copy(update={"spec": spec})
    write_atomic(folder / REPORT, render_report(metrics, results, run, folder.read(UsageRecord), rescored=rescored))
    return metrics
