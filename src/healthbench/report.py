"""A run folder as one self-contained HTML page: headline score, charts, metric table, per-task drill-down.

The page opens offline: styles, charts (inline SVG) and the small filter/sort script are all inline, and no
resource is fetched. Every text that comes from a run (replies, prompts, explanations, tags, settings) goes
through Jinja2 autoescaping, since model replies can hold markup. Tasks are collapsed `<details>` rows, so a
5,000-task run stays a page the browser can lay out quickly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .compare import load_results
from .metaeval import AGREEMENT
from .runner import METRICS, RUN, USAGE

if TYPE_CHECKING:
    from jinja2 import Template

REPORT = "report.html"
Z95 = 1.96
USAGE_FIELDS = ("calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens")

# Chart geometry (SVG user units); the label column grows with the longest label up to LABEL_MAX.
CHAR_W, LABEL_MAX, PLOT_W, VALUE_W, ROW_H = 6.6, 380.0, 520.0, 170.0, 22.0


@dataclass(frozen=True)
class Bar:
    """One chart row, in SVG coordinates relative to the plot's left edge."""

    label: str
    title: str
    text: str
    y: float
    width: float
    whisker_low: float
    whisker_high: float


@dataclass(frozen=True)
class Chart:
    """A horizontal bar chart with whiskers at the mean ± 1.96 bootstrap std."""

    title: str
    bars: list[Bar]
    label_w: float
    value_x: float
    width: float
    height: float
    ticks: list[tuple[float, str]]


@dataclass(frozen=True)
class MetricRow:
    """One row of the metric table."""

    name: str
    value: str
    std: str
    interval: str
    n: str


def _base_names(metrics: Mapping[str, float | int]) -> list[str]:
    """Metric names without their `:n_samples` / `:bootstrap_std` companions."""
    return [name for name in metrics if not name.endswith((":n_samples", ":bootstrap_std"))]


def _interval(value: float, std: float) -> tuple[float, float]:
    return max(0.0, value - Z95 * std), min(1.0, value + Z95 * std)


def _label(name: str) -> str:
    return name.split(":", 1)[-1].replace("_", " ")


def _chart(title: str, metrics: Mapping[str, float | int], names: Sequence[str], label_w: float) -> Chart:
    labels = [_label(name) for name in names]
    max_chars = int(LABEL_MAX / CHAR_W)
    bars = []
    for i, (name, label) in enumerate(zip(names, labels, strict=True)):
        value = float(metrics[name])
        std = float(metrics.get(f"{name}:bootstrap_std", 0.0))
        low, high = _interval(value, std)
        n = metrics.get(f"{name}:n_samples")
        shown = label if len(label) <= max_chars else label[: max_chars - 1] + "…"
        bars.append(
            Bar(
                label=shown,
                title=f"{name}: {value:.3f}, 95% interval [{low:.3f}, {high:.3f}], n={n}",
                text=f"{value:.3f} · sd {std:.3f}" + (f" · n={n}" if n is not None else ""),
                y=24 + i * ROW_H,
                width=PLOT_W * min(max(value, 0.0), 1.0),
                whisker_low=PLOT_W * low,
                whisker_high=PLOT_W * high,
            )
        )
    ticks = [(PLOT_W * t, f"{t:g}") for t in (0, 0.25, 0.5, 0.75, 1)]
    height = 24 + len(bars) * ROW_H + 6
    return Chart(title, bars, label_w, PLOT_W + 10, label_w + PLOT_W + VALUE_W, height, ticks)


def _charts(metrics: Mapping[str, float | int]) -> list[Chart]:
    names = _base_names(metrics)
    groups = [
        ("By theme", sorted(n for n in names if n.startswith("theme:"))),
        ("By axis", sorted(n for n in names if n.startswith("axis:"))),
        (
            "By consensus criterion (highest first)",
            sorted((n for n in names if n.startswith("cluster:")), key=lambda n: (-float(metrics[n]), n)),
        ),
    ]
    # One label column for all charts, so their scales line up under each other.
    longest = max((len(_label(n)) for _, group in groups for n in group), default=0)
    label_w = min(LABEL_MAX, CHAR_W * longest) + 12
    return [_chart(title, metrics, group, label_w) for title, group in groups if group]


def _metric_rows(metrics: Mapping[str, float | int]) -> list[MetricRow]:
    family = ("score", "overall_score", "theme:", "axis:", "level:", "cluster:")

    def order(name: str) -> tuple[int, str]:
        rank = next((i for i, f in enumerate(family) if name == f or (f.endswith(":") and name.startswith(f))), 6)
        return rank, name

    rows = []
    for name in sorted(_base_names(metrics), key=order):
        value = float(metrics[name])
        std = metrics.get(f"{name}:bootstrap_std")
        low, high = _interval(value, float(std or 0.0))
        rows.append(
            MetricRow(
                name=name,
                value=f"{value:.3f}",
                std="" if std is None else f"{float(std):.4f}",
                interval="" if std is None else f"[{low:.3f}, {high:.3f}]",
                n=str(metrics.get(f"{name}:n_samples", "")),
            )
        )
    return rows


def _usage_totals(usages: Iterable[Any]) -> dict[str, int] | None:
    """Field-wise sums of the usage dicts present; None when there are none."""
    totals: dict[str, int] | None = None
    for usage in usages:
        if isinstance(usage, Mapping):
            totals = totals or dict.fromkeys(USAGE_FIELDS, 0)
            for field in USAGE_FIELDS:
                totals[field] += int(usage.get(field, 0) or 0)
    return totals


def _usage(run: Mapping[str, Any], results: Sequence[Mapping[str, Any]], key: str) -> dict[str, int] | None:
    """The run's total when run.json has it, else the sum over the samples."""
    return _usage_totals([run[key]] if key in run else (record.get(key) for record in results))


def _theme(record: Mapping[str, Any]) -> str:
    tags = list(record.get("example_tags") or []) or list(record.get("metrics") or {})
    return next((_label(tag) for tag in tags if isinstance(tag, str) and tag.startswith("theme:")), "")


@dataclass(frozen=True, slots=True)
class Item:
    """A graded rubric item as shown: `kind` is met, penalty, missed or avoided."""

    points: int
    met: bool
    kind: str
    criterion: str
    explanation: str
    tags: str


@dataclass(frozen=True, slots=True)
class Task:
    """One drill-down row; the fields older runs did not write are empty."""

    index: int
    id: str
    repeat: int | None
    theme: str
    score: float | None
    bar: float
    prompt: list[tuple[str, str]]
    response: str
    met: list[Item]
    unmet: list[Item]
    penalties: int


def _item(item: Mapping[str, Any]) -> Item:
    points = int(item.get("points", 0))
    met = bool(item.get("criteria_met"))
    # A met negative item costs points (a penalty); an unmet one is a pitfall the reply avoided.
    kind = ("penalty" if met else "avoided") if points < 0 else ("met" if met else "missed")
    tags = " ".join(str(tag) for tag in item.get("tags") or [])
    return Item(points, met, kind, str(item.get("criterion", "")), str(item.get("explanation", "")), tags)


def _task(index: int, record: Mapping[str, Any]) -> Task:
    raw_score = record.get("score", (record.get("metrics") or {}).get("overall_score"))
    score = float(raw_score) if isinstance(raw_score, int | float) else None
    items = [_item(item) for item in record.get("rubric_items") or [] if isinstance(item, Mapping)]
    # Penalties first among the met items, missed points first among the rest: what cost the reply most.
    items.sort(key=lambda item: (item.kind not in ("penalty", "missed"), -abs(item.points)))
    prompt = [
        (str(m.get("role", "")), str(m.get("content", "")))
        for m in record.get("prompt") or []
        if isinstance(m, Mapping)
    ]
    repeat = record.get("repeat")
    return Task(
        index=index,
        id=str(record.get("prompt_id", "")),
        repeat=int(repeat) if repeat is not None else None,
        theme=_theme(record),
        score=score,
        bar=0.0 if score is None else 100 * min(max(score, 0.0), 1.0),
        prompt=prompt,
        response=str(record.get("response", "")),
        met=[item for item in items if item.met],
        unmet=[item for item in items if not item.met],
        penalties=sum(1 for item in items if item.kind == "penalty"),
    )


def _settings(run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every run setting that reads as one line; usage is shown as its own table."""
    shown = []
    for key, value in run.items():
        if key in ("usage", "policy_usage"):
            continue
        shown.append((str(key), value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)))
    return shown


@cache
def _template() -> Template:
    # Deferred: jinja2 costs 0.1 s of import, which every other CLI command would pay.
    from jinja2 import Environment, StrictUndefined

    env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)
    return env.from_string(resources.files("healthbench").joinpath("report.html.j2").read_text(encoding="utf-8"))


def render_report(
    metrics: Mapping[str, float | int],
    results: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
    spent: Mapping[str, Any] | None = None,
) -> str:
    """The report of one run as a self-contained HTML document.

    `metrics` is metrics.json (may be empty for an incomplete run), `results` the records of results.jsonl
    in any order, `run` run.json, `spent` usage.json; every key of `run` and `spent` and every field beyond
    `prompt_id` is optional.
    """
    score = metrics.get("score", metrics.get("overall_score"))
    std = metrics.get("score:bootstrap_std", metrics.get("overall_score:bootstrap_std"))
    n_samples = metrics.get("score:n_samples", metrics.get("overall_score:n_samples"))
    ordered = sorted(results, key=lambda r: (str(r.get("prompt_id", "")), int(r.get("repeat") or 0)))
    tasks = [_task(i, record) for i, record in enumerate(ordered)]
    notes = []
    if score is None:
        notes.append("No score: metrics.json is missing or empty (a run writes it only once every task is graded).")
    elif n_samples is not None and int(n_samples) != len(results):
        notes.append(f"metrics.json covers {n_samples} samples but results.jsonl holds {len(results)}.")
    grader_models = sorted({str(r["grader_model"]) for r in results if r.get("grader_model")})
    policy_models = sorted({str(r["policy_model"]) for r in results if r.get("policy_model")})
    usage = [(who, _usage(run, results, key)) for who, key in (("grader", "usage"), ("policy", "policy_usage"))]
    cost = run.get("cost_usd")
    interval = _interval(float(score), float(std)) if score is not None and std is not None else None
    return _template().render(
        score=None if score is None else f"{float(score):.3f}",
        std=None if std is None else f"{float(std):.4f}",
        interval=None if interval is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]",
        n_samples=n_samples if n_samples is not None else len(results),
        grader_model=run.get("grader_model") or ", ".join(grader_models) or "unknown",
        policy_model=run.get("model") or ", ".join(policy_models) or None,
        template_sha256=run.get("template_sha256"),
        cost=_dollars(cost) if isinstance(cost, int | float) else None,
        usage=[(who, totals) for who, totals in usage if totals is not None],
        usage_fields=USAGE_FIELDS,
        spending=_spending(spent or {}),
        notes=notes,
        charts=_charts(metrics),
        metric_rows=_metric_rows(metrics),
        settings=_settings(run),
        tasks=tasks,
        themes=sorted({task.theme for task in tasks if task.theme}),
    )


def _spending(spent: Mapping[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Per side of the whole run: who, model, calls, calls made in batches, and USD."""
    rows = []
    for who in ("policy", "grader"):
        side = (spent.get("whole_run") or {}).get(who)
        if isinstance(side, Mapping) and side.get("calls"):
            cost = side.get("cost_usd")
            price = _dollars(cost) if isinstance(cost, int | float) else "unpriced"
            calls, batched = int(side["calls"]), int(side.get("batch_calls") or 0)
            rows.append((who, str(side.get("model", "")), f"{calls:,}", f"{batched:,}", price))
    return rows


def _dollars(cost: float) -> str:
    # Cents hide the cost of a small run, so small amounts keep four decimals.
    return f"${cost:,.2f}" if cost >= 1 else f"${cost:.4f}"


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return value


def _write_html(out_dir: Path, html: str) -> Path:
    path = out_dir / REPORT
    # Not tempfile.mkstemp: its 0600 mode would carry over, and a report is meant to be shared.
    temp = out_dir / f".{REPORT}.{os.getpid()}.tmp"
    try:
        temp.write_text(html, encoding="utf-8", newline="")
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return path


def write_report(out_dir: Path) -> Path:
    """Render `out_dir/report.html` from the run's files and return its path.

    results.jsonl is required; metrics.json and run.json may be absent (an incomplete run). The page is
    written to a temporary file and renamed, so a reader never sees half of it.
    """
    html = render_report(
        _read_json(out_dir / METRICS), load_results(out_dir), _read_json(out_dir / RUN), _read_json(out_dir / USAGE)
    )
    return _write_html(out_dir, html)


# The meta-eval report: the grader's macro F1 beside the physicians', by theme and by consensus criterion.
_META_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>HealthBench meta-evaluation</title>
<style>
body{font:14px/1.5 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1f2328;max-width:1180px;margin:0 auto;
padding:24px 28px}
table{border-collapse:collapse;font-size:13px}th,td{padding:4px 10px;border-bottom:1px solid #d8dee4;text-align:left}
th{background:#f6f8fa}td.r{text-align:right;font-variant-numeric:tabular-nums}
.note{background:#fff8e1;color:#9a6700;border:1px solid #f0d98c;border-radius:6px;padding:8px 12px}
.rg{position:relative;width:220px;height:14px;background:#eef1f4;border-radius:3px}
.rg i{position:absolute;top:3px;height:8px;background:#9ab3e6}.rg b{position:absolute;top:0;width:3px;height:14px;
background:#cf222e}.rg u{position:absolute;top:1px;width:1px;height:12px;background:#24292f}
</style></head><body>
<h1>HealthBench meta-evaluation</h1>
<p>Grader <b>{{ grader }}</b>: macro F1 <b>{{ score }}</b> against physicians' labels over {{ rows }} rows;
physicians against each other, pooled: <b>{{ physicians }}</b>.</p>
{% for note in notes %}<p class="note">{{ note }}</p>{% endfor %}
{% for title, column, groups in tables %}<h2>{{ title }}</h2>
<table><tr><th>{{ column }}</th><th>rows</th><th>physician labels</th><th>grader F1</th><th>physicians pooled</th>
<th>physicians min / median / max (n)</th><th>grader (red) in physicians' range (0 to 1)</th></tr>
{% for g in groups %}<tr><td>{{ g.group }}</td><td class="r">{{ g.rows }}</td><td class="r">{{ g.pairs }}</td>
<td class="r">{{ g.model_f1 }}</td><td class="r">{{ g.physicians_pooled_f1 }}</td>
<td class="r">{{ g.spread }}</td><td><div class="rg">{{ g.bar | safe }}</div></td></tr>{% endfor %}
</table>{% endfor %}
<h2>Pooled agreement</h2><table><tr><th>figure</th><th>grader</th><th>physicians</th></tr>
{% for name, model, physician in pooled %}<tr><td>{{ name }}</td><td class="r">{{ model }}</td>
<td class="r">{{ physician }}</td></tr>{% endfor %}</table>
<h2>Run</h2><table>{% for key, value in settings %}<tr><td>{{ key }}</td><td>{{ value }}</td></tr>{% endfor %}</table>
</body></html>
"""


def _figure(value: Any) -> str:
    return "" if value is None else f"{float(value):.3f}"


def _meta_group(figures: Mapping[str, Any]) -> dict[str, Any]:
    """One table row: figures formatted, and the range bar as markup built from floats only."""
    model = figures.get("model_f1")
    low, mid, high = (figures.get(k) for k in ("physician_min", "physician_median", "physician_max"))
    bar, shown = "", ""
    if low is not None and mid is not None and high is not None:
        low, mid, high = float(low), float(mid), float(high)
        bar = f'<i style="left:{100 * low:.1f}%;width:{100 * (high - low):.1f}%"></i>'
        bar += f'<u style="left:{100 * mid:.1f}%"></u>'
        shown = f"{low:.3f} / {mid:.3f} / {high:.3f} ({figures.get('physicians')})"
    if model is not None:
        bar += f'<b style="left:calc({100 * float(model):.1f}% - 1px)"></b>'
    return {
        "group": str(figures.get("group", "")),
        "rows": figures.get("rows"),
        "pairs": figures.get("pairs"),
        "model_f1": _figure(model),
        "physicians_pooled_f1": _figure(figures.get("physicians_pooled_f1")),
        "spread": shown,
        "bar": bar,
    }


def render_meta_report(metrics: Mapping[str, Any], agreement: Mapping[str, Any], run: Mapping[str, Any]) -> str:
    """The report of a meta-eval run (metrics.json, agreement.json, run.json; each may be empty) as one
    self-contained, autoescaped HTML page."""
    from jinja2 import Environment

    notes = []
    if not metrics:
        notes.append("No figures: metrics.json is missing (a run writes it only once every row is graded).")
    elif "score" not in metrics:
        notes.append("The grader's macro F1 is undefined: it gave the same verdict on every row.")
    pooled = [
        (f"{metric} {cls}", *(_figure(metrics.get(f"pairwise_{who}_{metric}_{cls}")) for who in ("model", "physician")))
        for metric in ("precision", "recall", "f1")
        for cls in ("pos", "neg", "balanced")
    ]
    tables = [
        (title, column, [_meta_group(f) for f in agreement.get(key, [])])
        for title, column, key in (
            ("By theme", "theme", "by_theme"),
            ("By consensus criterion", "category", "by_category"),
        )
    ]
    return (
        Environment(autoescape=True)
        .from_string(_META_TEMPLATE)
        .render(
            grader=run.get("grader_model", "unknown"),
            score=_figure(metrics.get("score")) or "undefined",
            physicians=_figure(metrics.get("pairwise_physician_f1_balanced")) or "undefined",
            rows=metrics.get("score:n_samples", 0),
            notes=notes,
            tables=tables,
            pooled=pooled,
            settings=_settings(run),
        )
    )


def write_meta_report(out_dir: Path) -> Path:
    """Render `out_dir/report.html` of a meta-eval run from its metrics.json, agreement.json and run.json."""
    html = render_meta_report(_read_json(out_dir / METRICS), _read_json(out_dir / AGREEMENT), _read_json(out_dir / RUN))
    return _write_html(out_dir, html)
