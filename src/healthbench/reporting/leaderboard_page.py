"""The leaderboard as people read it: a Markdown table (the ranked headline, the marked runs, a table per slice
family) and one self-contained HTML page (no scripts, fonts or stylesheets from elsewhere), both from the board
`leaderboard.build` returns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from healthbench.files import write_atomic
from healthbench.reporting.pages import template
from healthbench.reporting.report.common import label
from healthbench.runs.outputs import FigureRecord, Leaderboard, Spread, interval_of

if TYPE_CHECKING:
    from jinja2 import Template


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], right: int) -> list[str]:
    """A Markdown table whose columns from index `right` on are numbers, right-aligned."""
    rule = ["---:" if i >= right else "---" for i in range(len(header))]
    return [f"| {' | '.join(_cell(c) for c in line)} |" for line in (header, rule, *rows)]


def _value(figure: FigureRecord | None) -> str:
    return "—" if figure is None else f"{figure.value:.3f}"


def _span(figure: Spread) -> str:
    span = interval_of(figure)
    return "" if span is None else f"[{span[0]:.3f}, {span[1]:.3f}]"


def format_markdown(board: Leaderboard) -> str:
    """The leaderboard as Markdown: the ranked headline table, the marked runs, then a table per family."""
    runs = board.runs
    adjusted = sorted({run.headline for run in runs} - {"score"})
    note = {"score": ""} | {kind: "†‡§¶"[i % 4] * (1 + i // 4) for i, kind in enumerate(adjusted)}
    rows = [
        (
            run.rank,
            run.run,
            run.model,
            run.grader,
            run.subset,
            ", ".join(dict.fromkeys(mark.kind for mark in run.marks)),
            run.n_samples or "",
            f"{run.score:.3f}{note[run.headline]}",
            _span(run),
            run.cost,
        )
        for run in runs
    ]
    header = ("#", "run", "model", "grader", "subset", "differs", "n", "score", "95% interval", "cost")
    lines = ["## HealthBench leaderboard", "", *_table(header, rows, 6), ""]
    lines += [f"{note[kind]} the headline is the {kind}" for kind in adjusted]
    if len({(run.task_set, run.rank) for run in runs}) < len(runs):
        lines.append("Runs whose scores are equal to the three decimals shown share a rank.")
    if len({run.task_set for run in runs}) > 1:
        lines.append("Runs on different task sets are not comparable: each task set's runs are ranked by themselves.")
    if adjusted:
        lines.append("Slice figures are unadjusted scores.")
    marked = [(run.run, m) for run in runs for m in run.marks]
    if marked:
        lines += ["", "Runs that differ from the others:", *(f"- {r}: {m.kind}: {m.detail}" for r, m in marked)]
    for family, names in board.families.items():
        shown = [run for run in runs if any(name in run.metrics for name in names)]
        table = [(run.rank, run.run, *(_value(run.metrics.get(name)) for name in names)) for run in shown]
        lines += ["", f"### By {family.replace('_', ' ')}", "", *_table(("#", "run", *map(label, names)), table, 2)]
    return "\n".join(lines) + "\n"


# Width of the headline's bar (SVG user units); the bar is the score, the whisker its 95% interval.
BAR_W = 200.0


def _shade(value: float) -> str:
    """A slice cell's colours: darker for higher scores, so each column reads as a heat map."""
    lightness = 96 - 48 * min(max(value, 0.0), 1.0)
    return f"background:hsl(214,65%,{lightness:.0f}%);color:{'#fff' if lightness < 64 else '#1f2328'}"


def _slice_cell(figure: FigureRecord | None, name: str) -> dict[str, str] | None:
    if figure is None:
        return None
    span = _span(figure)
    return {
        "text": f"{figure.value:.3f}",
        "title": f"{name}: {figure.value:.3f}{', 95% interval ' + span if span else ''}, n={figure.n_samples}",
        "style": _shade(figure.value),
    }


def _template() -> Template:
    return template("healthbench.reporting", "leaderboard.html.j2")


def render_page(board: Leaderboard) -> str:
    """The leaderboard as one self-contained HTML page (no scripts, fonts or stylesheets from elsewhere)."""
    runs = board.runs
    rows = []
    for run in runs:
        span = interval_of(run)
        whisker = None if span is None else (BAR_W * span[0], BAR_W * span[1])
        bar = BAR_W * min(max(run.score, 0.0), 1.0)
        rows.append(run.model_dump() | {"bar": bar, "whisker": whisker, "span": _span(run)})
    families = []
    for family, names in board.families.items():
        shown = [run for run in runs if any(name in run.metrics for name in names)]
        cells = [(run, [_slice_cell(run.metrics.get(name), name) for name in names]) for run in shown]
        families.append((f"By {family.replace('_', ' ')}", [label(name) for name in names], cells))
    return _template().render(
        runs=rows,
        bar_w=BAR_W,
        ticks=[(BAR_W * t, f"{t:g}") for t in (0, 0.25, 0.5, 0.75, 1)],
        kinds=sorted({run.headline for run in runs}),
        differences=board.differences,
        families=families,
    )


def write_page(board: Leaderboard, path: Path) -> Path:
    """Write the page to `path` atomically, so a reader never sees half of it."""
    return write_atomic(path, render_page(board))
