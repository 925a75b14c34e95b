"""The report of one graded run: the headline (and, when length-adjusted, the unadjusted score beside it),
whether the run is HealthBench Professional's official configuration, spending, charts, the metric table,
run settings and the per-task drill-down, rendered from report.html.j2."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from healthbench.errors import DataError
from healthbench.files import write_atomic
from healthbench.grading import official
from healthbench.grading.aggregate import aggregate_records
from healthbench.grading.official import Difference
from healthbench.grading.scoring import LENGTH_ADJUSTED, LengthAdjustment
from healthbench.reporting.compare import example_prefixes
from healthbench.reporting.report.charts import charts, interval, metric_rows, worst_curve
from healthbench.reporting.report.common import settings
from healthbench.reporting.report.spending import spending
from healthbench.reporting.report.status import counts, status
from healthbench.reporting.report.tasks import task
from healthbench.runs.folder import METRICS, REPORT, RESULTS, RunFolder
from healthbench.runs.policy import REFUSED_REPLY

if TYPE_CHECKING:
    from jinja2 import Template

# Set by `rebuild` when it rescores with other settings than the run was graded with.
GRADED_WITH = "length_adjustment_when_graded"


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


def _run_adjustment(run: Mapping[str, Any], notes: list[str]) -> LengthAdjustment | None:
    raw = run.get("length_adjustment")
    if raw is None:
        return None
    try:
        return LengthAdjustment.from_dict(raw)
    except ValueError as exc:
        notes.append(f"run.json: field length_adjustment: {exc}")
        return None


@cache
def _template() -> Template:
    # Deferred: jinja2 costs 0.1 s of import, which every other CLI command would pay.
    from jinja2 import Environment, StrictUndefined

    env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)
    source = resources.files("healthbench.reporting.report").joinpath("report.html.j2").read_text(encoding="utf-8")
    return env.from_string(source)


def render_report(
    metrics: Mapping[str, float | int],
    results: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
    spent: Mapping[str, Any] | None = None,
    failures: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The report of one run as a self-contained HTML document.

    `metrics` is metrics.json (may be empty for an incomplete run), `results` the records of results.jsonl
    in any order, `run` run.json, `spent` usage.json, `failures` the records of failures.jsonl; every key of
    `run` and `spent` and every field beyond `prompt_id` is optional. The headline is length-adjusted when
    metrics.json has the adjusted score (or, without metrics, when run.json records a length adjustment); its
    settings come from run.json. A run that is not finished says what is missing and lists its failures.
    """
    notes: list[str] = []
    adjustment = _run_adjustment(run, notes)
    adjusted = LENGTH_ADJUSTED in metrics or (not metrics and adjustment is not None)
    headline = _figure(metrics, "score") if "score" in metrics else _figure(metrics, "overall_score")
    tally = counts(run, results)
    state = status(run, metrics, results, tally, failures, unit="samples" if tally.repeats > 1 else "tasks")
    if headline.n is not None and headline.n != len(results):
        notes.append(f"metrics.json covers {headline.n} samples but results.jsonl holds {len(results)}.")
    if metrics and not adjusted and adjustment is not None:
        notes.append(
            f"run.json records a length adjustment ({adjustment.describe()}) but metrics.json has no "
            "length-adjusted score: the headline is the unadjusted score."
        )
    if GRADED_WITH in run:
        graded = _run_adjustment({"length_adjustment": run[GRADED_WITH]}, notes)
        notes.append(
            f"Rescored by `healthbench report` with length adjustment {_describe(adjustment)}; the run "
            f"was graded with {_describe(graded)}."
        )
    if adjusted:
        caption = "headline: length-adjusted score, " + (
            adjustment.describe() if adjustment is not None else "settings not recorded in run.json"
        )
    else:
        caption = "headline: score, not length-adjusted"
    prefixes = example_prefixes(results, metrics)
    ordered = sorted(results, key=lambda r: (str(r.get("prompt_id", "")), int(r.get("repeat") or 0)))
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
    grader_models = sorted({str(r["grader_model"]) for r in results if r.get("grader_model")})
    policy_models = sorted({str(r["policy_model"]) for r in results if r.get("policy_model")})
    refused = sum(1 for record in results if record.get("policy_error"))
    return _template().render(
        headline=headline,
        caption=caption,
        adjusted=adjusted,
        unadjusted=_figure(metrics, "overall_score") if adjusted else None,
        official=run.get("official_configuration"),
        differences=[str(Difference.read(d)) for d in run.get("official_differences") or []],
        counts=tally,
        state=state,
        grader_model=run.get("grader_model") or ", ".join(grader_models) or "unknown",
        policy_model=run.get("model") or ", ".join(policy_models) or None,
        template_sha256=run.get("template_sha256"),
        spending=spending(spent or {}, run, results),
        notes=notes,
        charts=charts(metrics, prefixes),
        curve=worst_curve(metrics),
        refused=refused,
        refused_reply=REFUSED_REPLY,
        metric_rows=metric_rows(metrics, prefixes),
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
        folder.read_metrics(), folder.read_results(), folder.read_run(), folder.read_usage(), folder.read_failures()
    )
    return write_atomic(folder / REPORT, html)


def _rescored(run: Mapping[str, Any], adjustment: LengthAdjustment | None) -> dict[str, Any]:
    """run.json as the page describes a rescoring with `adjustment`: those settings, and whether a
    HealthBench Professional run is still in its official configuration with them."""
    new = None if adjustment is None else adjustment.as_dict()
    if run.get("length_adjustment") == new:
        return dict(run)
    shown = dict(run) | {"length_adjustment": new, GRADED_WITH: run.get("length_adjustment")}
    return shown | official.with_length_adjustment(run, adjustment)


def rebuild(out: Path, *, seed: int, length_adjustment: LengthAdjustment | None) -> dict[str, float | int]:
    """Re-aggregate `out/results.jsonl` into `out/metrics.json` (with `length_adjustment`, the headline is
    the length-adjusted score) and rewrite `out/report.html`; returns the metrics.

    run.json is left as it is; when the settings differ from those it records, the page says so and
    describes the run with the settings used.
    """
    folder = RunFolder(out)
    results = folder.read_results()
    if not results:
        raise DataError(f"{folder / RESULTS}: no results")
    metrics = aggregate_records(results, seed=seed, length_adjustment=length_adjustment)
    folder.write(METRICS, metrics)
    run = _rescored(folder.read_run(), length_adjustment)
    write_atomic(folder / REPORT, render_report(metrics, results, run, folder.read_usage()))
    return metrics
