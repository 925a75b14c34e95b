"""Coroutines run together where one failure is the end of all of them: `asyncio.TaskGroup`, with the failure
raised as itself.

A `TaskGroup` cancels the rest at the first failure and awaits them, so none outlives the caller (nor sends a
request after it), and it does the same when the caller is cancelled from outside. It raises what failed inside
an `ExceptionGroup`; callers here want the first failure as it was raised (a `GradingError` names its task and
rubric item), so that is what `together` raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def together(coroutines: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """The results of `coroutines`, run together, in their order; the first to fail cancels the others, awaits
    them, and is raised as itself."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(coroutine) for coroutine in coroutines]
    except BaseExceptionGroup as failed:
        first = failed.exceptions[0]
        raise first from first.__cause__
    return [task.result() for task in tasks]
