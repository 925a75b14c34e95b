"""What a server's grading costs, as a log line a minute: replies graded, grader calls paid for and those whose
verdicts were reused (the batch routes' `reuse`), tokens, the prompt cache's hit rate, the cost at list prices and
what the cache saved, over the last minute and since the server started.

A line is said when a reply is graded at least `interval` seconds after the last line (nothing is said while
nothing is graded), so an idle server logs nothing and no timer runs beside the server's own loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from healthbench.api.wire import Usage
from healthbench.runs.pricing import Price, cache_savings, cost, hit_rate, load_prices

INTERVAL = 60.0


@dataclass
class _Window:
    """Replies graded and the grader's usage by model, over some stretch of time."""

    replies: int = 0
    usage: dict[str, Usage] = field(default_factory=dict)
    reused: int = 0

    def add(self, model: str, usage: Usage, reused: int) -> None:
        self.replies += 1
        self.usage.setdefault(model, Usage()).add(usage)
        self.reused += reused

    def figures(self, prices: dict[str, Price]) -> dict[str, Any]:
        """Replies, calls, tokens, hit rate, cost and savings (USD of the priced models; None when none is)."""
        total = Usage()
        for usage in self.usage.values():
            total.add(usage)
        costs = [c for model, usage in self.usage.items() if (c := cost(usage, model, prices)) is not None]
        saved = [s for model, usage in self.usage.items() if (s := cache_savings(usage, model, prices)) is not None]
        return {
            "replies": self.replies,
            "calls": total.calls,
            "reused_calls": self.reused,
            "prompt_tokens": total.prompt_tokens,
            "cached_prompt_tokens": total.cached_prompt_tokens,
            "completion_tokens": total.completion_tokens,
            "cache_hit_rate": None if (rate := hit_rate(total)) is None else round(rate, 4),
            # None too when some calls were answered without usage: their cost is not known, and is never $0.
            "cost_usd": round(sum(costs), 4) if costs and not total.unmetered else None,
            "unmetered_calls": total.unmetered,
            "cache_saved_usd": round(sum(saved), 4) if saved else None,
        }


class UsageLog:
    """The grader usage of a server's graded replies, said through `say` (a log call taking keyword fields)
    every `interval` seconds while replies are graded."""

    def __init__(
        self,
        say: Callable[..., None],
        *,
        interval: float = INTERVAL,
        prices: dict[str, Price] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._say = say
        self._interval = interval
        self._prices = prices if prices is not None else load_prices(None)
        self._clock = clock
        self._since = clock()
        self._window = _Window()
        self._total = _Window()

    def add(self, model: str, usage: Usage, *, reused: int = 0) -> None:
        """One graded reply: what its grading paid (`usage`; `calls` counts the calls paid for) and the calls whose
        verdicts it reused without paying (`reused_calls`: the batch routes' `reuse`); say the line when it is
        time."""
        self._window.add(model, usage, reused)
        self._total.add(model, usage, reused)
        now = self._clock()
        if now - self._since < self._interval:
            return
        self._say(
            seconds=round(now - self._since, 1),
            last=self._window.figures(self._prices),
            since_start=self._total.figures(self._prices),
        )
        self._since, self._window = now, _Window()
