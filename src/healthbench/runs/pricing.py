"""What calls cost: a per-model price table (overridable), and the meter a run prices its usage with.

Prices are USD per million tokens, OpenAI's list prices for standard (live) requests; the Batch API
charges half, unless a table entry gives batch prices of its own. A model is matched by the longest table
entry its name starts with, so dated snapshots (`gpt-4.1-2025-04-14`) find their family. Unknown models
cost nothing in the sums and are named as such.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from healthbench.api.wire import Usage
from healthbench.errors import DataError
from healthbench.runs.records import SideUsage, UsageReport

# USD per million tokens: finite and not negative (a negative price would show a run as earning money, and an
# infinite one write `Infinity` into usage.json), and at most a dollar a token, past any model's list price.
Rate = Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)]


class Price(BaseModel):
    """USD per million tokens; the batch prices default to half the live ones."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: Rate
    cached_input: Rate
    output: Rate
    batch_input: Rate | None = None
    batch_cached_input: Rate | None = None
    batch_output: Rate | None = None

    def rates(self, batch: bool) -> tuple[float, float, float]:
        """(input, cached input, output) for live or batch requests."""
        if not batch:
            return self.input, self.cached_input, self.output
        return (
            self.input / 2 if self.batch_input is None else self.batch_input,
            self.cached_input / 2 if self.batch_cached_input is None else self.batch_cached_input,
            self.output / 2 if self.batch_output is None else self.batch_output,
        )


PRICES: dict[str, Price] = {
    name: Price(input=i, cached_input=c, output=o)
    for name, (i, c, o) in {
        "gpt-4.1": (2.00, 0.50, 8.00),
        "gpt-4.1-mini": (0.40, 0.10, 1.60),
        "gpt-4.1-nano": (0.10, 0.025, 0.40),
        "gpt-4o": (2.50, 1.25, 10.00),
        "gpt-4o-mini": (0.15, 0.075, 0.60),
        "gpt-5": (1.25, 0.125, 10.00),
        "gpt-5-mini": (0.25, 0.025, 2.00),
        "gpt-5-nano": (0.05, 0.005, 0.40),
        # The gpt-5.1 to 5.4 list prices as published listings give them (not read from OpenAI's own page here).
        "gpt-5.1": (1.25, 0.125, 10.00),
        "gpt-5.2": (1.75, 0.175, 14.00),
        "gpt-5.4": (2.50, 0.25, 15.00),
        "gpt-5.4-mini": (0.75, 0.075, 4.50),
        "gpt-5.4-nano": (0.20, 0.02, 1.25),
        "o3": (2.00, 0.50, 8.00),
        "o3-mini": (1.10, 0.55, 4.40),
        "o4-mini": (1.10, 0.275, 4.40),
        "gpt-3.5-turbo": (0.50, 0.50, 1.50),
    }.items()
}


def load_prices(path: Path | None) -> dict[str, Price]:
    """The built-in table, updated from a JSON file `{model: {input, cached_input, output}}` if given."""
    prices = dict(PRICES)
    if path is None:
        return prices
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read prices ({exc})") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: prices must be an object of model names")
    for model, value in raw.items():
        try:
            prices[model] = Price.model_validate(value)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in error["loc"])
            raise DataError(f"{path}: field {model}.{field}: {error['msg']}") from None
    return prices


def price_for(model: str, prices: Mapping[str, Price]) -> Price | None:
    """The longest table entry that the model name starts with."""
    matches = [name for name in prices if model == name or model.startswith(name + "-")]
    return prices[max(matches, key=len)] if matches else None


def cost(usage: Usage, model: str, prices: Mapping[str, Price], *, batch: bool | None = None) -> float | None:
    """USD for this usage (at batch prices if `batch`, by default if the usage is marked so), or None for a
    model without a price, or for usage that holds calls answered without usage (`Usage.unmetered`): never $0
    for what is not known."""
    price = price_for(model, prices)
    if price is None or usage.unmetered:
        return None
    fresh_rate, cached_rate, output_rate = price.rates(usage.batch if batch is None else batch)
    fresh = usage.prompt_tokens - usage.cached_prompt_tokens
    return (fresh * fresh_rate + usage.cached_prompt_tokens * cached_rate + usage.completion_tokens * output_rate) / 1e6


def cache_savings(usage: Usage, model: str, prices: Mapping[str, Price], *, batch: bool | None = None) -> float | None:
    """USD the cached prompt tokens of this usage saved against the same tokens uncached (None for a model without
    a price, or for usage not all known: `Usage.unmetered`): what prompt caching took off the bill."""
    price = price_for(model, prices)
    if price is None or usage.unmetered:
        return None
    fresh_rate, cached_rate, _ = price.rates(usage.batch if batch is None else batch)
    return usage.cached_prompt_tokens * (fresh_rate - cached_rate) / 1e6


def hit_rate(usage: Usage) -> float | None:
    """The share of prompt tokens read from the provider's prompt cache (None without prompt tokens)."""
    return usage.cached_prompt_tokens / usage.prompt_tokens if usage.prompt_tokens else None


# Seconds of answers the progress bar's rate is taken over: the span of the pace's own "req/s", so the two
# figures it shows side by side measure the same stretch of time.
RATE_SPAN = 5.0


class CostMeter:
    """Prices a run's usage for the progress bar, usage.json and the summary line.

    A model missing from the table is reported as unpriced; the total then covers the priced part only
    and says so, rather than hiding what is known.
    """

    def __init__(self, prices: Path | None, grader_model: str | None, policy_model: str | None) -> None:
        self.table = load_prices(prices)
        self.grader_model = grader_model
        self.policy_model = policy_model
        self.started = time.monotonic()
        self._seen: deque[tuple[float, int]] = deque()

    def _side(self, model: str, parts: Sequence[Usage]) -> SideUsage:
        """Summed tokens of one side, its batch calls, and its cost with each part at its own prices."""
        total = Usage()
        for part in parts:
            total.add(part)
        priced = [part for part in parts if part.calls] or [total]
        costs = [cost(part, model, self.table) for part in priced]
        saved = [cache_savings(part, model, self.table) for part in priced]
        return SideUsage(
            **total.as_dict() | {"batch": 0},
            batch_calls=sum(part.calls for part in parts if part.batch),
            model=model,
            cost_usd=None if None in costs else sum(c for c in costs if c is not None),
            cache_saved_usd=None if None in saved else sum(c for c in saved if c is not None),
        )

    def usage_report(self, policy: Usage | Sequence[Usage], grader: Usage | Sequence[Usage]) -> UsageReport:
        """Tokens and USD per side (each side one usage, or its live and batch parts; no grader side for a run
        without a grader), the priced total, and the models without a price."""
        sides = {}
        if self.grader_model is not None:
            sides["grader"] = self._side(self.grader_model, [grader] if isinstance(grader, Usage) else grader)
        if self.policy_model is not None:
            sides["policy"] = self._side(self.policy_model, [policy] if isinstance(policy, Usage) else policy)
        priced = [side for name, side in sides.items() if side.calls or name == "grader"]
        unknown = any(side.unmetered for side in priced)
        return UsageReport(
            **sides,
            cost_usd=None if unknown else sum(side.cost_usd or 0.0 for side in priced),
            unpriced_models=sorted({side.model for side in priced if price_for(side.model, self.table) is None}),
        )

    @staticmethod
    def describe(report: UsageReport) -> str:
        """`$1.23`, with any unpriced model named; `unknown` when some calls were answered without usage."""
        unmetered = sum(side.unmetered for side in (report.grader, report.policy) if side is not None)
        if unmetered:
            return f"unknown ({unmetered:,} calls were answered without usage)"
        text = f"${report.cost_usd or 0.0:,.2f}"
        if report.unpriced_models:
            text += f" (+ {', '.join(report.unpriced_models)}: no price)"
        return text

    def progress(self, policy: Usage, grader: Usage) -> str:
        """Calls answered per second over the last few seconds (both sides; a reused verdict is no call) and
        the cost so far, for the progress bar: "answered 58 calls/s, $1.23 so far"."""
        now, calls = time.monotonic(), policy.calls + grader.calls
        self._seen.append((now, calls))
        while len(self._seen) > 1 and self._seen[1][0] <= now - RATE_SPAN:
            self._seen.popleft()
        since, before = self._seen[0] if now - self._seen[0][0] >= 1.0 else (self.started, 0)
        rate = (calls - before) / max(now - since, 1e-9)
        return f"answered {rate:.0f} calls/s, {self.describe(self.usage_report(policy, grader))} so far"
