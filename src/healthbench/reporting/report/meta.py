"""The meta-evaluation's report: the grader's macro F1 beside the physicians', by theme and by consensus
criterion, as one self-contained, autoescaped page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from healthbench.files import write_atomic
from healthbench.reporting.report.common import settings
from healthbench.reporting.report.status import counts, status
from healthbench.runs.folder import AGREEMENT, REPORT, RunFolder

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
.private{color:#656d76;font-size:12.5px}.banner{background:#fde8e8;color:#cf222e;border:2px solid #cf222e;
border-radius:8px;padding:12px 16px}.banner ul{color:#1f2328}.fails td{vertical-align:top;overflow-wrap:anywhere}
</style></head><body>
<h1>HealthBench meta-evaluation</h1>
<p class="private" id="private">This page holds HealthBench meta-evaluation conversations and completions verbatim.
OpenAI asks that HealthBench examples not be posted online in plain text: share the figures, not this page.</p>
{% if not state.finished %}<div class="banner" id="unfinished" role="alert"><b>This run is not finished: no score.</b>
<ul>{% for problem in state.problems %}<li>{{ problem }}</li>{% endfor %}</ul>
Run the same command again on this folder to finish it: nothing already answered is asked again.</div>{% endif %}
<p>Grader <b>{{ grader }}</b>: macro F1 <b>{{ score }}</b> against physicians' labels over {{ rows }} rows;
physicians against each other, pooled: <b>{{ physicians }}</b>.</p>
{% for note in notes %}<p class="note">{{ note }}</p>{% endfor %}
{% if state.failures %}<h2 id="failures">Failures</h2>
<p>{{ state.failures|length + state.unlisted }} rows of the last session could not be graded:</p>
<table class="fails"><tr><th>row</th></tr>{% for f in state.failures %}<tr><td>{{ f.cause }}</td></tr>{% endfor %}
</table>{% if state.unlisted %}<p>And {{ state.unlisted }} more: failures.jsonl in the run folder lists them all.</p>
{% endif %}
{% endif %}
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


def render_meta_report(
    metrics: Mapping[str, Any],
    agreement: Mapping[str, Any],
    run: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]] = (),
    failures: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The report of a meta-eval run (metrics.json, agreement.json, run.json, the records of results.jsonl
    and failures.jsonl; each may be empty) as one self-contained, autoescaped HTML page; a run that is not
    finished says what is missing and lists the rows that could not be graded."""
    from jinja2 import Environment

    notes = []
    state = status(run, metrics, results, counts(run, results), failures, unit="rows")
    if metrics and "score" not in metrics:
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
            rows=metrics.get("score:n_samples", len(results)),
            notes=notes,
            state=state,
            tables=tables,
            pooled=pooled,
            settings=settings(run),
        )
    )


def write_meta_report(out_dir: Path) -> Path:
    """Render `out_dir/report.html` of a meta-eval run from its metrics.json, agreement.json and run.json."""
    folder = RunFolder(out_dir)
    html = render_meta_report(
        folder.read_metrics(),
        folder.read_json(AGREEMENT),
        folder.read_run(),
        folder.read_results(),
        folder.read_failures(),
    )
    return write_atomic(folder / REPORT, html)
