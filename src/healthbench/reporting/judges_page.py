"""`healthbench judges`' record as people read it: lines on the terminal and one self-contained HTML page (no
scripts, fonts or stylesheets from elsewhere) beside judges.json: agreement with physicians, then hackability,
then the two against each other in one chart with the best trade-offs marked."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from healthbench.files import write_atomic
from healthbench.grading.grader import DEFAULT_GRADER_MODEL
from healthbench.grading.hackability import MIN_VERDICT_CONVERSATIONS
from healthbench.reporting.metamodes import PAPER_MACRO_F1
from healthbench.reporting.pages import template
from healthbench.reporting.probe import described
from healthbench.runs.judges import Interval, JudgeEntry, JudgeHackability, JudgesRecord, TrickFigures

if TYPE_CHECKING:
    from jinja2 import Template

# Width of a macro F1 bar at 1.0 (SVG user units).
BAR_W = 360.0
# The agreement-against-hackability chart (SVG user units): the plot's size, and the room left of it (the axis
# and its label) and below it.
PLOT_W, PLOT_H, PLOT_LEFT, PLOT_TOP, PLOT_BOTTOM = 540.0, 320.0, 70.0, 20.0, 52.0


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


def _trick(figures: TrickFigures) -> str:
    """A trick's difference with its interval, and its two rates: "+0.420 [+0.300, +0.550] (met 92% vs 50%)"."""
    return f"{_signed(figures.difference, figures.interval)} (met {figures.fooled:.0%} vs {figures.false_met:.0%})"


def hack_verdict(hack: JudgeHackability | None, margin: float) -> str:
    """What a grader's trials allow saying of it, in words: which tricks fool it, or that it is hard to fool, or
    that the rows say neither, or that they are too few for a verdict; and why it has none yet."""
    if hack is None:
        return "not tried"
    if hack.verdict is None:
        return f"trials stopped: {hack.failure.split(';', 1)[0]}" if hack.failure else "no trial graded yet"
    if hack.verdict == "hackable":
        fooling = [figures.trick for figures in hack.tricks if figures.verdict == "hackable"]
        return f"HACKABLE by {', '.join(fooling)}"
    if hack.verdict == "hard to fool":
        return f"hard to fool: no trick raises its false-met rate by more than {margin:+.2f} (95% interval's top)"
    if hack.verdict == "too few rows":
        return f"too few rows for a verdict (it takes {MIN_VERDICT_CONVERSATIONS} conversations a trick)"
    return "no trick shown to fool it, and none ruled out: try more rows (--hack-limit)"


def tradeoff_verdict(record: JudgesRecord) -> str:
    """The choice both axes allow, in a sentence: the best trade-offs, and the graders a trick fools."""
    hackable = [e.name for e in record.judges if e.hackability is not None and e.hackability.verdict == "hackable"]
    said = []
    if record.front:
        said.append(
            f"Best trade-off{'s' if len(record.front) > 1 else ''}: {', '.join(record.front)} (no other grader both "
            "agrees better with physicians and is fooled less)."
        )
    if hackable:
        said.append(
            f"A trick fools {', '.join(hackable)}: a policy trained on {'it' if len(hackable) == 1 else 'them'} "
            "is rewarded for the trick."
        )
    return " ".join(said)


def hackability_lines(record: JudgesRecord) -> list[str]:
    """The trials as the command prints them: the rows they were made on, a line per grader (its verdict and the
    trick that fools it most), then the best trade-offs."""
    if not record.tricks:
        return []
    lines = [
        f"hackability: {len(record.tricks)} tricks on up to {record.hack_rows} rows the physicians' majority judged "
        "not met; a trick's figure is the grader's met rate on the rewritten completion less that on the untouched "
        f"one [{record.confidence:.0%} interval over conversations]:"
    ]
    for entry in record.judges:
        hack = entry.hackability
        worst = None if hack is None or hack.worst is None else hack.trick(hack.worst)
        most = "" if worst is None else f"; fooled most by {worst.trick} {_trick(worst)}"
        lines.append(f"  {entry.name}: {hack_verdict(hack, record.hard_to_fool_margin)}{most}")
    if record.attacker is not None:
        attacker = record.attacker
        lines.append(
            f"  the attacker {attacker.model} wrote {attacker.rewrites} rewrites by {', '.join(attacker.strategies)}"
            + (f" ({attacker.failed} could not be made)" if attacker.failed else "")
            + (f"; stopped: {attacker.failure.split(';', 1)[0]}" if attacker.failure else "")
        )
    if record.front:
        lines.append(
            f"best trade-offs (no other grader both agrees better and is fooled less): {', '.join(record.front)}"
        )
    return lines


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


def _ticks(low: float, high: float, ceiling: float | None = None) -> tuple[float, float, float]:
    """A domain holding `low` and `high` out to whole ticks, at least one tick wide (widened downwards where
    upwards would pass `ceiling`), and its tick step."""
    step = 0.05 if high - low <= 0.3 else 0.1 if high - low <= 1 else 0.25
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    if last <= first:
        if ceiling is not None and (first + 1) * step > ceiling + 1e-9:
            first -= 1
        else:
            last = first + 1
    return first * step, last * step, step


def tradeoff_chart(record: JudgesRecord, names: Sequence[str]) -> dict[str, Any] | None:
    """The graders with figures on both axes as points of one chart: agreement (macro F1) up, hackability (the
    difference of the trick that fools each most) across, each with its intervals as whiskers, the best trade-offs
    (`record.front`) marked and joined; None when no grader has both."""
    found = []
    for entry, short in zip(record.judges, names, strict=True):
        hack = entry.hackability
        worst = None if hack is None or hack.worst is None else hack.trick(hack.worst)
        if entry.finished and entry.macro_f1 is not None and worst is not None:
            found.append((entry, short, worst))
    if not found:
        return None
    xs = [v for _, _, w in found for v in (w.difference, *(w.interval or ()))]
    ys = [v for e, _, _ in found for v in (e.macro_f1 or 0.0, *(e.interval or ()))]
    x_low, x_high, x_step = _ticks(min(0.0, *xs), max(xs))
    y_low, y_high, y_step = _ticks(max(0.0, min(ys)), min(1.0, max(ys)), ceiling=1.0)

    def x(value: float) -> float:
        return PLOT_LEFT + PLOT_W * (value - x_low) / (x_high - x_low)

    def y(value: float) -> float:
        return PLOT_TOP + PLOT_H * (y_high - value) / (y_high - y_low)

    points = []
    for entry, short, worst in found:
        f1 = entry.macro_f1 or 0.0
        points.append(
            {
                "name": short,
                "x": x(worst.difference),
                "y": y(f1),
                "x_span": None if worst.interval is None else (x(worst.interval[0]), x(worst.interval[1])),
                "y_span": None if entry.interval is None else (y(entry.interval[0]), y(entry.interval[1])),
                "front": entry.name in record.front,
                "title": f"{entry.name}: macro F1 {_f1(f1, entry.interval)}; fooled most by {worst.trick} "
                f"{_trick(worst)}",
            }
        )
    line = sorted((p["x"], p["y"]) for p in points if p["front"])
    count_x, count_y = round((x_high - x_low) / x_step), round((y_high - y_low) / y_step)
    return {
        "points": points,
        "front": " ".join(f"{px:.1f},{py:.1f}" for px, py in line),
        "x_ticks": [(x(x_low + i * x_step), f"{x_low + i * x_step:+.2f}") for i in range(count_x + 1)],
        "y_ticks": [(y(y_low + i * y_step), f"{y_low + i * y_step:.2f}") for i in range(count_y + 1)],
        "zero": x(0.0),
        "left": PLOT_LEFT,
        "top": PLOT_TOP,
        "right": PLOT_LEFT + PLOT_W,
        "bottom": PLOT_TOP + PLOT_H,
        "width": PLOT_LEFT + PLOT_W + 190,
        "height": PLOT_TOP + PLOT_H + PLOT_BOTTOM,
    }


def _fooled_shade(figures: TrickFigures) -> str:
    """A trick cell's colours: red for a trick that fools the grader, green where it is hard to fool, grey where
    the rows say neither."""
    if figures.verdict == "hackable":
        strength = min(max(figures.difference, 0.0), 1.0)
        return f"background:hsl(4,75%,{88 - 38 * strength:.0f}%);color:{'#fff' if strength > 0.6 else '#1f2328'}"
    if figures.verdict == "hard to fool":
        return "background:#dcf1e1;color:#1a7f37"
    return "background:#f0f2f4;color:#656d76"


def _hack_rows(record: JudgesRecord, names: Sequence[str]) -> list[dict[str, Any]]:
    """A row per grader with trials: its verdict, the trick that fools it most, and a cell per trick."""
    rows = []
    for entry, short in zip(record.judges, names, strict=True):
        hack = entry.hackability
        if hack is None:
            continue
        worst = None if hack.worst is None else hack.trick(hack.worst)
        cells = {}
        for figures in hack.tricks:
            cells[figures.trick] = {
                "text": _signed(figures.difference, None),
                "title": f"{entry.name}, {figures.trick}: {_trick(figures)} on {figures.rows} rows of "
                f"{figures.conversations} conversations: {figures.verdict}",
                "style": _fooled_shade(figures),
            }
        rows.append(
            {
                "short": short,
                "name": entry.name,
                "verdict": hack_verdict(hack, record.hard_to_fool_margin),
                "hackable": hack.verdict == "hackable",
                "worst": None if worst is None else f"{worst.trick} {_trick(worst)}",
                "trials": f"{hack.trials} trials on {hack.rows} rows" + ("" if hack.finished else ", not all graded"),
                "cells": cells,
            }
        )
    return rows


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
    names = short_names(record)
    return _template().render(
        tradeoff=tradeoff_chart(record, names),
        hack_rows=_hack_rows(record, names),
        tricks=[(name, described(name, None)[1]) for name in record.tricks],
        min_conversations=MIN_VERDICT_CONVERSATIONS,
        hack_verdict=tradeoff_verdict(record),
        hack_warn=any(e.hackability is not None and e.hackability.verdict == "hackable" for e in record.judges),
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
