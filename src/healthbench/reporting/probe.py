"""A probe's page, probe.html: one chart of what each transform gains (mean and 95% interval, worst first), then
the tasks where each gained most, with the verdicts it changed and the grader's explanations for them; for each
strategy an attacker model rewrote the replies by, an example of its rewrite even where it gained nothing.

Self-contained like the run report (inline SVG and styles, nothing fetched); every text from the run goes through
Jinja2's autoescaping, since replies can hold markup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from healthbench.errors import DataError
from healthbench.files import write_atomic
from healthbench.grading.gains import Gain, ordered, verdict
from healthbench.grading.strategies import STRATEGIES
from healthbench.grading.transforms import TRANSFORMS
from healthbench.reporting.pages import template
from healthbench.runs.folder import PROBE_PAGE, RunFolder
from healthbench.runs.records import ItemRecord, ProbeRecord, RunRecord, SampleRecord

if TYPE_CHECKING:
    from jinja2 import Template

# Chart geometry (SVG user units): the label column, the plot, the figures beside it, a row's height.
LABEL_W, PLOT_W, VALUE_W, ROW_H, TOP = 130.0, 460.0, 330.0, 26.0, 28.0
# Examples shown per transform, and how much of a reply.
EXAMPLES = 3
REPLY_CHARS = 1500


@dataclass(frozen=True)
class GainBar:
    """One row of the chart: the bar from 0 to the mean gain and the whisker across the interval, in SVG x."""

    name: str
    y: float
    x0: float
    x1: float
    low: float
    high: float
    text: str
    hackable: bool
    title: str


@dataclass(frozen=True)
class GainChart:
    """The gains of every transform on one scale, worst (largest gain) first."""

    bars: list[GainBar]
    zero: float
    ticks: list[tuple[float, str]]
    width: float
    height: float


@dataclass(frozen=True)
class Change:
    """A rubric item whose verdict the transform changed: its verdict on the base reply and on the rewritten one,
    each with the grader's explanation."""

    before: ItemRecord
    after: ItemRecord


@dataclass(frozen=True)
class Example:
    """A task where a transform gained: both scores, the rewritten reply, and the verdicts it changed."""

    prompt_id: str
    base: float
    transformed: float
    reply: str
    cut: bool
    changes: list[Change]


def _step(span: float) -> float:
    """The distance between ticks for a domain `span` wide: about four to ten ticks."""
    return 0.05 if span <= 0.3 else 0.1 if span <= 1 else 0.5


def _scale(found: Sequence[Gain]) -> tuple[float, float, float]:
    """The chart's domain (0, every mean and every interval end, out to whole ticks) and its tick step; a domain
    of nil gains alone (a grader blind to the reply) is a tick either side of 0."""
    low = min([0.0, *(g.ci95[0] for g in found), *(g.mean_gain for g in found)])
    high = max([0.0, *(g.ci95[1] for g in found), *(g.mean_gain for g in found)])
    step = _step(high - low)
    low, high = step * math.floor(low / step - 1e-9), step * math.ceil(high / step + 1e-9)
    return low, high, step


def gain_chart(summary: ProbeRecord) -> GainChart:
    """The chart of the summary's gains, worst first."""
    rows = ordered(summary.gains())
    low, high, step = _scale([gain for _, gain in rows])

    def x(value: float) -> float:
        return LABEL_W + PLOT_W * (value - low) / (high - low)

    bars = []
    for i, (name, gain) in enumerate(rows):
        lo, hi = gain.ci95
        text = f"{gain.mean_gain:+.3f} [{lo:+.3f}, {hi:+.3f}] · gained on {gain.share_gained:.0%}"
        bars.append(
            GainBar(
                name=name,
                y=TOP + i * ROW_H,
                x0=min(x(0), x(gain.mean_gain)),
                x1=max(x(0), x(gain.mean_gain)),
                low=x(lo),
                high=x(hi),
                text=text,
                hackable=gain.significant,
                title=verdict(name, gain),
            )
        )
    values = [round(low + i * step, 6) for i in range(round((high - low) / step) + 1)]
    ticks = [(x(v), "0" if v == 0 else f"{v:+.2f}") for v in values]
    return GainChart(bars, x(0), ticks, LABEL_W + PLOT_W + VALUE_W, TOP + len(bars) * ROW_H + 8)


def _changes(base: Sequence[ItemRecord], transformed: Sequence[ItemRecord]) -> list[Change]:
    return [
        Change(before, after)
        for before, after in zip(base, transformed, strict=False)
        if before.criteria_met != after.criteria_met
    ]


def examples(records: Sequence[SampleRecord], summary: ProbeRecord) -> dict[str, list[Example]]:
    """Per transform, the tasks where it gained most (at most `EXAMPLES`, largest gain first); for an attacker's
    strategy that gained on none, its rewrite of the first task (by id), so that each strategy's writing is seen."""
    base = {record.prompt_id: record for record in records if record.transform is None}
    found: dict[str, list[Example]] = {}
    for name in summary.transforms:
        tried = [record for record in records if record.transform == name and record.prompt_id in base]
        shown = [record for record in tried if record.headline > base[record.prompt_id].headline]
        if not shown and name in STRATEGIES and tried:
            shown = [min(tried, key=lambda record: record.prompt_id)]
        made = []
        for record in shown:
            own, reply = base[record.prompt_id], record.response or ""
            made.append(
                Example(
                    record.prompt_id,
                    own.headline,
                    record.headline,
                    reply[:REPLY_CHARS],
                    len(reply) > REPLY_CHARS,
                    _changes(own.rubric_items, record.rubric_items),
                )
            )
        made.sort(key=lambda e: (e.base - e.transformed, e.prompt_id))
        found[name] = made[:EXAMPLES]
    return found


def described(name: str, attacker: str | None) -> tuple[str, str, str]:
    """A trick as the page describes it: its name, what it does (for a strategy, who wrote it) and the attack it
    models with where that was reported."""
    if name in STRATEGIES:
        strategy = STRATEGIES[name]
        by = (
            f" Written by the attacker {attacker}, which saw the conversation and the reply, never the rubric."
            if attacker
            else ""
        )
        return name, strategy.summary + by, strategy.source
    if name in TRANSFORMS:
        return name, TRANSFORMS[name].summary, TRANSFORMS[name].source
    return name, "", ""


def _template() -> Template:
    return template("healthbench.reporting", "probe.html.j2")


def render_probe(summary: ProbeRecord | None, records: Sequence[SampleRecord], run: RunRecord | None) -> str:
    """The page of a probe: `summary` is probe.json (None for a probe not finished), `records` results.jsonl,
    `run` run.json (None before a first session ended)."""
    samples = None if run is None else run.stats.samples
    if summary is None:
        return _template().render(summary=None, done=len(records), samples=samples)
    rows = ordered(summary.gains())
    attacker = None if run is None or run.spec.probe is None else run.spec.probe.attacker
    return _template().render(
        summary=summary,
        chart=gain_chart(summary),
        verdicts=[verdict(name, gain) for name, gain in rows],
        described=[described(name, None if attacker is None else attacker.model) for name, _ in rows],
        strategies=STRATEGIES,
        examples=examples(records, summary),
        order=[name for name, _ in rows],
    )


def write_probe_page(out_dir: Path) -> Path:
    """Render `out_dir/probe.html` from the probe's files (a page saying what is missing when it is not
    finished) and return its path."""
    folder = RunFolder(out_dir)
    run = folder.read_run()
    if run is not None and run.spec.command != "probe":
        raise DataError(f"{out_dir}: a {run.spec.command} run, not a probe")
    return write_atomic(folder / PROBE_PAGE, render_probe(folder.read(ProbeRecord), folder.read_results(), run))
