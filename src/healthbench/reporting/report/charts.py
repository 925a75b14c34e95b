"""The report's charts and metric table: a bar chart per slice family, whiskers at the bootstrap interval.

Slices are the example-tag families a run's tasks carry (theme for HealthBench; use case, type, difficulty
and specialty for HealthBench Professional), then the rubric-tag families axis and consensus criterion
when the rubric items carry them. Every bar is a metric of metrics.json as it stands. A run with repeats
also gets its worst-at-k curve, drawn from the `worst_at_k:K` metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from healthbench.data.tags import RUBRIC_FAMILIES
from healthbench.grading.scoring import LENGTH_ADJUSTED, WORST_AT_K
from healthbench.reporting.report.common import label

Z95 = 1.96

# Chart geometry (SVG user units); the label column grows with the longest label up to LABEL_MAX.
CHAR_W, LABEL_MAX, PLOT_W, VALUE_W, ROW_H = 6.6, 380.0, 520.0, 170.0, 22.0


# Worst-at-k plot geometry: the plot area's size and its margins for the axis labels.
CURVE_W, CURVE_H, CURVE_LEFT, CURVE_TOP, CURVE_BOTTOM = 520.0, 200.0, 48.0, 16.0, 40.0


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


def base_names(metrics: Mapping[str, float | int]) -> list[str]:
    """Metric names without their `:n_samples` / `:bootstrap_std` companions."""
    return [name for name in metrics if not name.endswith((":n_samples", ":bootstrap_std"))]


def interval(value: float, std: float) -> tuple[float, float]:
    """The 95% normal interval of a clipped mean, clipped to [0, 1] like the mean."""
    return max(0.0, value - Z95 * std), min(1.0, value + Z95 * std)


def _chart(title: str, metrics: Mapping[str, float | int], names: Sequence[str], label_w: float) -> Chart:
    max_chars = int(LABEL_MAX / CHAR_W)
    bars = []
    for i, name in enumerate(names):
        shown = label(name)
        value = float(metrics[name])
        std = float(metrics.get(f"{name}:bootstrap_std", 0.0))
        low, high = interval(value, std)
        n = metrics.get(f"{name}:n_samples")
        bars.append(
            Bar(
                label=shown if len(shown) <= max_chars else shown[: max_chars - 1] + "…",
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


def charts(metrics: Mapping[str, float | int], prefixes: Sequence[str]) -> list[Chart]:
    """A chart per example-tag family in `prefixes`, then by axis and by consensus criterion."""
    names = base_names(metrics)
    groups = [
        (f"By {prefix.replace('_', ' ')}", sorted(n for n in names if n.startswith(f"{prefix}:")))
        for prefix in prefixes
    ]
    groups += [
        ("By axis", sorted(n for n in names if n.startswith("axis:"))),
        (
            "By consensus criterion (highest first)",
            sorted((n for n in names if n.startswith("cluster:")), key=lambda n: (-float(metrics[n]), n)),
        ),
    ]
    # One label column for all charts, so their scales line up under each other.
    longest = max((len(label(n)) for _, group in groups for n in group), default=0)
    label_w = min(LABEL_MAX, CHAR_W * longest) + 12
    return [_chart(title, metrics, group, label_w) for title, group in groups if group]


def metric_rows(metrics: Mapping[str, float | int], prefixes: Sequence[str]) -> list[MetricRow]:
    """Every metric with its bootstrap std, interval and count: headline first, then slice families."""
    family = ("score", "overall_score", LENGTH_ADJUSTED, *(f"{p}:" for p in (*prefixes, *RUBRIC_FAMILIES)))

    def order(name: str) -> tuple[int, str]:
        rank = next(
            (i for i, f in enumerate(family) if name == f or (f.endswith(":") and name.startswith(f))), len(family)
        )
        return rank, name

    rows = []
    for name in sorted(base_names(metrics), key=order):
        value = float(metrics[name])
        std = metrics.get(f"{name}:bootstrap_std")
        low, high = interval(value, float(std or 0.0))
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


@dataclass(frozen=True)
class Curve:
    """The worst-at-k curve as an SVG line chart; `points` are (x, y, K, value shown)."""

    points: list[tuple[float, float, int, str]]
    path: str
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    left: float
    top: float
    plot_w: float
    plot_h: float
    width: float
    height: float


def worst_curve(metrics: Mapping[str, float | int]) -> Curve | None:
    """The `worst_at_k:K` metrics as a curve over K = 1..n on a [0, 1] scale; None when the run has none."""
    values: dict[int, float] = {}
    for name, value in metrics.items():
        prefix, _, k = name.partition(":")
        if prefix == WORST_AT_K and k.isdigit():
            values[int(k)] = float(value)
    if not values:
        return None
    n = max(values)
    # One K alone would sit at the left edge; the scale spans at least 1..2 so it has width.
    step = CURVE_W / max(n - 1, 1)
    points = [
        (CURVE_LEFT + (k - 1) * step, CURVE_TOP + CURVE_H * (1 - min(max(v, 0.0), 1.0)), k, f"{v:.3f}")
        for k, v in sorted(values.items())
    ]
    path = "M" + " L".join(f"{x:.1f} {y:.1f}" for x, y, _, _ in points)
    # Every K is labelled up to 20 of them; past that, about ten evenly spaced.
    every = 1 if n <= 20 else -(-n // 10)
    x_ticks = [(CURVE_LEFT + (k - 1) * step, str(k)) for k in sorted(values) if k == 1 or k == n or k % every == 0]
    y_ticks = [(CURVE_TOP + CURVE_H * (1 - t), f"{t:g}") for t in (0, 0.25, 0.5, 0.75, 1)]
    width, height = CURVE_LEFT + CURVE_W + 40, CURVE_TOP + CURVE_H + CURVE_BOTTOM
    return Curve(points, path, x_ticks, y_ticks, CURVE_LEFT, CURVE_TOP, CURVE_W, CURVE_H, width, height)
