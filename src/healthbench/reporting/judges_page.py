"""`healthbench judges`' record as people read it: lines on the terminal and one self-contained HTML page (no
scripts, fonts or stylesheets from elsewhere) beside judges.json."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from healthbench.files import write_atomic
from healthbench.grading.grader import DEFAULT_GRADER_MODEL
from healthbench.reporting.metamodes import PAPER_MACRO_F1
from healthbench.reporting.pages import template
from healthbench.runs.judges import Interval, JudgeEntry, JudgesRecord

if TYPE_CHECKING:
    from jinja2 import Template

# Width of a macro F1 bar at 1.0 (SVG user units).
BAR_W = 360.0


def _f1(value: float | None, span: Interval | None = None) -> str:
    if value is None:
        return "undefined"
    return f"{value:.3f}" if span is None else f"{value:.3f} [{span[0]:.3f}, {span[1]:.3f}]"


def _figure(entry: JudgeEntry) -> str:
    """The grader's macro F1 with its interval; where a grader has none, why: it failed (stopped, or rows it could
    not grade) or it is not finished (interrupted)."""
    if not entry.finished:
        return "failed" if entry.failure is not None or entry.failed_rows else "not finished"
    return _f1(entry.macro_f1, entry.interval)


def _signed(value: float, span: Interval | None) -> str:
    shown = f"{value:+.3f}"
    return shown if span is None else f"{shown} [{span[0]:+.3f}, {span[1]:+.3f}]"


def _money(value: float | None) -> str:
    return "no price" if value is None else f"${value:,.2f}"


def _tokens(value: float) -> str:
    return f"{value / 1e6:,.1f}M" if value >= 1e6 else f"{value / 1e3:,.0f}k"


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _latency(entry: JudgeEntry) -> str:
    timed = entry.latency
    if timed is None or not timed.n:
        return "not timed"
    return f"{_seconds(timed.p50)} / {_seconds(timed.p95)}"


def _cost(entry: JudgeEntry) -> str:
    cost = entry.cost
    if cost is None:
        return "—"
    given, written = cost.prompt_tokens_per_1000_rewards, cost.completion_tokens_per_1000_rewards
    return f"{_money(cost.usd_per_1000_rewards)} ({_tokens(given)} in, {_tokens(written)} out)"


def _status(entry: JudgeEntry) -> str:
    if entry.failure is not None:
        return f"stopped: {entry.failure.split(';', 1)[0]}"  # the cause; judges.json keeps all of it
    if not entry.finished:
        return f"not finished: {entry.failed_rows} rows failed" if entry.failed_rows else "not finished"
    return "finished"


def verdict(record: JudgesRecord) -> str:
    """Which grader agrees with physicians best, and whether the rows can tell it from the others."""
    if record.leader is None:
        if any(entry.finished for entry in record.judges):
            return "No finished grader's macro F1 is defined (each gave one verdict only): nothing to choose between."
        return "No grader finished: nothing to choose between yet."
    finished = [entry for entry in record.judges if entry.finished]
    if len(finished) < 2:
        return f"Only {record.leader} finished: nothing to set it against yet."
    if not record.differences:
        return f"{record.leader} has the highest macro F1, but the graders graded different rows: no paired difference."
    undecided = record.undecided
    if undecided:
        return (
            f"Too close to choose: the rows cannot tell {record.leader} (highest macro F1) from "
            f"{', '.join(undecided)}, the {record.confidence:.0%} interval of the paired difference includes 0. "
            "Grade more rows (a larger --limit, or none, in a new --out) before choosing."
        )
    return (
        f"{record.leader} agrees with physicians best: every other grader is below it beyond the "
        f"{record.confidence:.0%} interval of the paired difference."
    )


def judges_lines(record: JudgesRecord) -> list[str]:
    """The record as the command prints it: a line per grader, a column per figure, then the verdict."""
    differences = {difference.name: difference for difference in record.differences}

    def against(entry: JudgeEntry) -> str:
        if entry.name == record.leader:
            return "leader"
        found = differences.get(entry.name)
        return "—" if found is None else _signed(found.difference, found.interval)

    header = (
        "grader",
        "macro F1 [95% interval]",
        "vs the leader [paired]",
        "per 1,000 rewards",
        "latency p50 / p95",
        "failed / retried",
        "status",
    )
    rows = [header] + [
        (
            entry.name,
            _figure(entry),
            against(entry),
            _cost(entry),
            _latency(entry),
            f"{entry.failed_rows} / {entry.retried_answers}",
            _status(entry),
        )
        for entry in record.judges
    ]
    widths = [max(len(row[column]) for row in rows) + 2 for column in range(len(header) - 1)]
    lines = ["".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + row[-1] for row in rows]
    physicians = next((entry.physicians_f1 for entry in record.judges if entry.physicians_f1 is not None), None)
    if physicians is not None:
        lines.append(f"physicians' own macro F1 on these rows (the line to beat): {physicians:.3f}")
    return [*lines, verdict(record)]


def short_names(record: JudgesRecord) -> list[str]:
    """Each grader as the chart and the category table name it: its model, its endpoint when another grader has
    the same model, and its call mode when the graders are called in more than one."""
    models = [entry.model for entry in record.judges]
    modes = {entry.calls for entry in record.judges}
    names = []
    for entry in record.judges:
        name = entry.model
        if models.count(entry.model) > len(modes):
            name += f" @{entry.base_url.split('://', 1)[-1]}"
        names.append(f"{name} ({entry.calls})" if len(modes) > 1 else name)
    return names


def _template() -> Template:
    return template("healthbench.reporting", "judges.html.j2")


def _bar(entry: JudgeEntry) -> dict[str, Any] | None:
    if entry.macro_f1 is None:
        return None
    span = entry.interval
    return {
        "width": BAR_W * min(max(entry.macro_f1, 0.0), 1.0),
        "whisker": None if span is None else (BAR_W * span[0], BAR_W * span[1]),
    }


def _shade(value: float | None) -> str:
    """A category cell's colours: darker for higher macro F1, so a column reads as a heat map."""
    if value is None:
        return ""
    lightness = 96 - 48 * min(max(value, 0.0), 1.0)
    return f"background:hsl(214,65%,{lightness:.0f}%);color:{'#fff' if lightness < 64 else '#1f2328'}"


def _categories(record: JudgesRecord) -> list[dict[str, Any]]:
    """A row per category: its rows, the physicians' macro F1 and each grader's cell."""
    names: dict[str, dict[str, Any]] = {}
    for column, entry in enumerate(record.judges):
        for figures in entry.categories:
            row = names.setdefault(
                figures.category,
                {"name": figures.category.removeprefix("cluster:"), "rows": figures.rows, "cells": {}},
            )
            row["physicians"] = _f1(figures.physicians_f1)
            row["cells"][column] = {
                "text": _f1(figures.macro_f1),
                "title": f"{entry.name}: {_f1(figures.macro_f1, figures.interval)}, {figures.rows} rows",
                "style": _shade(figures.macro_f1),
            }
    return [names[name] | {"physicians": names[name].get("physicians", "—")} for name in sorted(names)]


def render_page(record: JudgesRecord) -> str:
    """judges.html: the graders side by side, as one self-contained page."""
    differences = {difference.name: difference for difference in record.differences}
    judges = []
    for entry, short in zip(record.judges, short_names(record), strict=True):
        found = differences.get(entry.name)
        judges.append(
            {
                "entry": entry,
                "short": short,
                "f1": _figure(entry),
                "against": "leader"
                if entry.name == record.leader
                else ("—" if found is None else _signed(found.difference, found.interval)),
                "decided": found is None or found.decided,
                "cost": _cost(entry),
                "usd": _money(entry.cost.cost_usd) if entry.cost is not None else "—",
                "latency": _latency(entry),
                "status": _status(entry),
                "bar": _bar(entry),
                "report": f"{entry.folder}/report.html" if entry.finished else None,
            }
        )
    physicians = next((entry.physicians_f1 for entry in record.judges if entry.physicians_f1 is not None), None)
    unfinished = any(not entry.finished for entry in record.judges)
    return _template().render(
        record=record,
        warn=unfinished or record.leader is None or bool(record.undecided),
        judges=judges,
        verdict=verdict(record),
        bar_w=BAR_W,
        ticks=[(BAR_W * t, f"{t:g}") for t in (0, 0.25, 0.5, 0.75, 1)],
        physicians=None if physicians is None else {"x": BAR_W * physicians, "text": _f1(physicians)},
        categories=_categories(record),
        paper=", ".join(f"{model} {value:.3f}" for model, value in PAPER_MACRO_F1.items()),
        reference_model=DEFAULT_GRADER_MODEL,
    )


def write_page(record: JudgesRecord, path: Path) -> Path:
    """Write judges.html atomically, so a reader never sees half of it."""
    return write_atomic(path, render_page(record))
