"""The in-flight budget: a fixed limit, or one that follows what the pace of each key it serves needs."""

from __future__ import annotations

import asyncio

import pytest

from healthbench.api.pacing.gate import Budget


class Key:
    """Stands for one key's gate: what a budget is told the needs of."""


async def _peak(budget: Budget, tasks: int, step: asyncio.Event | None = None) -> int:
    """Run `tasks` holders through the budget; the most ever in flight at once."""
    current = peak = 0

    async def one() -> None:
        nonlocal current, peak
        async with budget.slot():
            current += 1
            peak = max(peak, current)
            await (step.wait() if step else asyncio.sleep(0))
            current -= 1

    await asyncio.gather(*(one() for _ in range(tasks)))
    return peak


def test_a_fixed_budget_never_grows() -> None:
    budget = Budget(4)
    budget.need(Key(), 100)
    assert budget.limit == 4 and not budget.adaptive
    assert asyncio.run(_peak(budget, 20)) == 4


def test_an_adaptive_budget_follows_what_its_keys_need_within_its_size_and_ceiling() -> None:
    budget, policy, grader = Budget(32, ceiling=256), Key(), Key()
    budget.need(policy, 100)
    budget.need(grader, 120)
    assert budget.limit == 220  # what both keys' paces need, together
    budget.need(grader, 400)
    assert budget.limit == 256  # never above its ceiling
    budget.need(policy, None)
    budget.need(grader, 10)
    assert budget.limit == 32  # never below its size
    with pytest.raises(ValueError):
        Budget(0)


def test_waiters_go_as_soon_as_the_budget_grows() -> None:
    async def main() -> int:
        budget, key = Budget(2, ceiling=10), Key()
        release = asyncio.Event()
        holders = asyncio.ensure_future(_peak(budget, 8, release))
        await asyncio.sleep(0)
        budget.need(key, 8)  # the limit rises while six wait: they start without a release
        await asyncio.sleep(0)
        release.set()
        return await holders

    assert asyncio.run(main()) == 8
