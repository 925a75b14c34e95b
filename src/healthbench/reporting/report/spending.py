"""The report's tokens and cost: the whole run's (every session of the folder) with the last session's beside
them, from usage.json, whose `whole_run` is what the run's store holds and whose `this_session` is what the
last session added to it, so the sessions' figures add up to the whole run's.

A folder without usage.json (a run made before it was written, or a page rendered from results alone) gets
the sums over its graded samples instead, labelled as such: they leave out the calls of samples that failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from healthbench.runs.records import (
    MetaRecord,
    RunRecord,
    SampleRecord,
    SideUsage,
    UsageNumbers,
    UsageRecord,
    UsageReport,
)

TOKEN_FIELDS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens")
USAGE_FIELDS = ("calls", *TOKEN_FIELDS, "unmetered")
Side = Literal["policy", "grader"]
SIDES: tuple[Side, ...] = ("policy", "grader")


@dataclass(frozen=True)
class Line:
    """One row of the table: a side (or the total) with its model, calls, tokens and USD, formatted."""

    who: str
    model: str
    calls: str
    batched: str
    tokens: list[str]
    usd: str


@dataclass(frozen=True)
class Scope:
    """A group of rows: the whole run, this session, or the graded samples when usage.json is missing."""

    title: str
    note: str
    lines: list[Line]


@dataclass(frozen=True)
class Spending:
    """The table (with a column of calls made in batches when any were), the whole run's cost and this
    session's, as the page's key facts show them."""

    scopes: list[Scope]
    cost: str | None
    session_cost: str | None
    batched: bool = False
    cache: list[str] = field(default_factory=list)


def dollars(cost: float) -> str:
    """USD as the page shows it; cents hide the cost of a small run, so small amounts keep four decimals."""
    return f"${cost:,.2f}" if cost >= 1 else f"${cost:.4f}"


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else dollars(value)


def _line(who: str, side: UsageNumbers, model: str = "", cost: float | None = None, batch_calls: int = 0) -> Line:
    return Line(
        who=who,
        model=model,
        calls=f"{side.calls:,}",
        batched=f"{batch_calls:,}",
        tokens=[f"{getattr(side, field):,}" for field in TOKEN_FIELDS],
        # Calls answered without usage: their tokens are not known, so neither is the cost (never $0).
        usd="unknown" if side.unmetered else _usd(cost),
    )


def _side_line(who: str, side: SideUsage) -> Line:
    return _line(who, side, side.model, side.cost_usd, side.batch_calls)


def _lines(report: UsageReport, sides: Sequence[Side]) -> list[Line]:
    """The rows of one usage.json report (`whole_run` or `this_session`): each side, then the total."""
    parts = [report.side(who) or SideUsage() for who in sides]
    lines = [_side_line(who, part) for who, part in zip(sides, parts, strict=True)]
    total = UsageNumbers(**{field: sum(getattr(part, field) for part in parts) for field in USAGE_FIELDS})
    total_line = _line("total", total, cost=report.cost_usd, batch_calls=sum(part.batch_calls for part in parts))
    if report.unpriced_models and report.cost_usd is not None and not total.unmetered:
        total_line = replace(
            total_line, usd=f"{dollars(report.cost_usd)} + {', '.join(report.unpriced_models)}: no price"
        )
    return [*lines, total_line] if len(lines) > 1 else lines


def _summed(usages: Iterable[UsageNumbers | None]) -> UsageNumbers | None:
    """Field-wise sums of the usages present; None when there are none."""
    present = [usage for usage in usages if usage is not None]
    if not present:
        return None
    return UsageNumbers(**{field: sum(getattr(usage, field) for usage in present) for field in USAGE_FIELDS})


def _from_samples(run: RunRecord | None, results: Sequence[SampleRecord | MetaRecord]) -> Scope | None:
    spec = run.spec if run is not None else None
    policy = spec.policy.model if spec is not None and spec.policy is not None else ""
    grader = spec.grader.model if spec is not None else ""
    sides = (
        ("policy", _summed(r.policy_usage for r in results if isinstance(r, SampleRecord)), policy),
        ("grader", _summed(r.usage for r in results), grader),
    )
    lines = [replace(_line(who, totals, model), usd="") for who, totals, model in sides if totals is not None]
    if not lines:
        return None
    note = "usage.json is missing: these are the sums over the graded samples, without the calls of failed ones"
    return Scope("graded samples", note, lines)


def spending(
    usage: UsageRecord | None, run: RunRecord | None, results: Sequence[SampleRecord | MetaRecord]
) -> Spending:
    """The tokens and cost table of a run from its usage.json (may be missing), run.json and results."""
    cost = run.stats.cost_usd if run is not None else None
    shown_cost = None if cost is None else dollars(cost)
    if usage is None:
        scope = _from_samples(run, results)
        return Spending([scope] if scope else [], shown_cost, None)
    whole, session = usage.whole_run, usage.this_session
    present: list[Side] = [who for who in SIDES if whole.side(who) is not None]
    sides = [who for who in present if (side := whole.side(who)) is not None and side.calls] or present
    scopes = [Scope("whole run", "every session of this run folder", _lines(whole, sides))]
    session_cost = None
    if session is not None:
        session_cost = "unknown" if _unmetered(session) else _usd(session.cost_usd)
        hits = usage.verdict_cache_hits
        reused = f"; {hits:,} verdicts reused from earlier sessions" if hits else ""
        lines = _lines(session, sides)
        # One session made every call: the same rows twice would only be noise.
        every = lines == scopes[0].lines
        note = "the last session, which wrote this page" + (", made every call of the run" if every else reused)
        scopes.append(Scope("this session", note, [] if every else lines))
    batched = any(line.batched != "0" for line in scopes[0].lines)
    total = "unknown" if _unmetered(whole) else None if whole.cost_usd is None else dollars(whole.cost_usd)
    cache = [line for who in sides if (line := cache_line(who, whole.side(who))) is not None]
    return Spending(scopes, total or shown_cost, session_cost, batched, cache)


def _unmetered(report: UsageReport) -> bool:
    """Whether some calls of a report were answered without usage, which makes its cost unknown."""
    return any(side.unmetered for side in (report.grader, report.policy) if side is not None)


def cache_line(who: str, side: SideUsage | None) -> str | None:
    """One side's prompt cache over the whole run: "grader: 18% of prompt tokens read from the prompt cache
    (12,345 of 67,890), $0.42 saved"; None for a side without prompt tokens."""
    if side is None or side.cache_hit_rate is None:
        return None
    saved = "" if side.cache_saved_usd is None else f", {dollars(side.cache_saved_usd)} saved"
    return (
        f"{who}: {side.cache_hit_rate:.0%} of prompt tokens read from the prompt cache "
        f"({side.cached_prompt_tokens:,} of {side.prompt_tokens:,}){saved}"
    )
