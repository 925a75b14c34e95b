"""The report's tokens and cost: the whole run's (every session of the folder) with the last session's beside
them, from usage.json, whose `whole_run` is what the run's store holds and whose `this_session` is what the
last session added to it, so the sessions' figures add up to the whole run's.

A folder without usage.json (a run made before it was written, or a page rendered from results alone) gets
the sums over its graded samples instead, labelled as such: they leave out the calls of samples that failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

TOKEN_FIELDS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens")
USAGE_FIELDS = ("calls", *TOKEN_FIELDS)
SIDES = ("policy", "grader")


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


def dollars(cost: float) -> str:
    """USD as the page shows it; cents hide the cost of a small run, so small amounts keep four decimals."""
    return f"${cost:,.2f}" if cost >= 1 else f"${cost:.4f}"


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _usd(value: Any) -> str:
    return dollars(float(value)) if isinstance(value, int | float) and not isinstance(value, bool) else "unpriced"


def _line(who: str, side: Mapping[str, Any]) -> Line:
    return Line(
        who=who,
        model=str(side.get("model", "")),
        calls=f"{_count(side.get('calls')):,}",
        batched=f"{_count(side.get('batch_calls')):,}",
        tokens=[f"{_count(side.get(field)):,}" for field in TOKEN_FIELDS],
        usd=_usd(side.get("cost_usd")),
    )


def _lines(report: Mapping[str, Any], sides: Sequence[str]) -> list[Line]:
    """The rows of one usage.json report (`whole_run` or `this_session`): each side, then the total."""
    parts: list[Mapping[str, Any]] = []
    for who in sides:
        part = report.get(who)
        parts.append(part if isinstance(part, Mapping) else {})
    lines = [_line(who, part) for who, part in zip(sides, parts, strict=True)]
    total: dict[str, Any] = {
        field: sum(_count(part.get(field)) for part in parts) for field in (*USAGE_FIELDS, "batch_calls")
    }
    unpriced = [str(name) for name in report.get("unpriced_models") or []]
    cost = report.get("cost_usd")
    total_line = _line("total", total | {"cost_usd": cost})
    if unpriced and isinstance(cost, int | float):
        total_line = replace(total_line, usd=f"{dollars(float(cost))} + {', '.join(unpriced)}: no price")
    return [*lines, total_line] if len(lines) > 1 else lines


def _summed(usages: Iterable[Any]) -> dict[str, int] | None:
    """Field-wise sums of the usage dicts present; None when there are none."""
    totals: dict[str, int] | None = None
    for usage in usages:
        if isinstance(usage, Mapping):
            totals = totals or dict.fromkeys(USAGE_FIELDS, 0)
            for field in USAGE_FIELDS:
                totals[field] += _count(usage.get(field))
    return totals


def _from_samples(run: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> Scope | None:
    lines = []
    for who, key, model in (("policy", "policy_usage", "model"), ("grader", "usage", "grader_model")):
        totals = _summed([run[key]] if key in run else (record.get(key) for record in results))
        if totals is not None:
            lines.append(_line(who, totals | {"model": run.get(model, ""), "cost_usd": None}))
    if not lines:
        return None
    note = "usage.json is missing: these are the sums over the graded samples, without the calls of failed ones"
    return Scope("graded samples", note, [replace(line, usd="") for line in lines])


def spending(usage: Mapping[str, Any], run: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> Spending:
    """The tokens and cost table of a run from its usage.json (`usage`, may be empty), run.json and results."""
    whole, session = usage.get("whole_run"), usage.get("this_session")
    cost = run.get("cost_usd")
    shown_cost = dollars(float(cost)) if isinstance(cost, int | float) else None
    if not isinstance(whole, Mapping):
        scope = _from_samples(run, results)
        return Spending([scope] if scope else [], shown_cost, None)
    sides = [who for who in SIDES if isinstance(whole.get(who), Mapping) and _count(whole[who].get("calls"))]
    sides = sides or [who for who in SIDES if isinstance(whole.get(who), Mapping)]
    scopes = [Scope("whole run", "every session of this run folder", _lines(whole, sides))]
    session_cost = None
    if isinstance(session, Mapping):
        session_cost = _usd(session.get("cost_usd"))
        hits = _count(usage.get("verdict_cache_hits"))
        reused = f"; {hits:,} verdicts reused from earlier sessions" if hits else ""
        lines = _lines(session, sides)
        # One session made every call: the same rows twice would only be noise.
        every = lines == scopes[0].lines
        note = "the last session, which wrote this page" + (", made every call of the run" if every else reused)
        scopes.append(Scope("this session", note, [] if every else lines))
    total = whole.get("cost_usd")
    batched = any(line.batched != "0" for line in scopes[0].lines)
    return Spending(
        scopes, dollars(float(total)) if isinstance(total, int | float) else shown_cost, session_cost, batched
    )
