"""A training step's rewards in one grader round: every reply of the step graded at once, in this process, as
`serve` grades (the TRL reward function and the verl reward file are thin layers over this).

A step's replies name their task by `prompt_id`. The rows come from a `data` argument, else `HEALTHBENCH_DATA` (a
path, or a subset name: full, hard, consensus, professional), else the full set; they are loaded once per process
and, when a split is named, restricted to it (`healthbench.data.splits`; the official full set's `heldout` is
HealthBench Hard, as `export` makes it). A prompt_id not among them is `UnknownTask`, naming it and the split,
before any grader call.

The grader is `serve`'s: its settings from the arguments, else the environment variables `serve` reads
(`GradingOptions.plan(..., served=True)`: `HEALTHBENCH_GRADER_API_KEY`, `HEALTHBENCH_GRADER_BASE_URL`,
`HEALTHBENCH_GRADER_MODEL`, the SDK's `CHAT_*`, never `OPENAI_BASE_URL`), its pace shared through
`HEALTHBENCH_PACE_STORE=redis://...` with every process naming it (many trainer ranks or Ray workers of one key
pace as `serve` replicas do). Its budget is `serve`'s (`deployment.served_budget`): 256 calls in flight, growing
with the key's limits up to 1,024; `concurrency` (or `HEALTHBENCH_GRADER_CONCURRENCY`) sets it, and then it stays
there. A key whose limits are not known yet gets the step's calls at once within that budget, not the grading
commands' slow start (`slow_start=True` or `HEALTHBENCH_GRADER_SLOW_START=1` restores it). Graders are leased from
one `GraderPool` per budget in the process, shared by every source of rows on that budget, so they stay warm across
steps as long as the caller's event loop lives (a trainer's: TRL's daemon loop, verl's reward loop, or `verl.py`'s
own).

Each reply's reward is `grade_sample`'s, exactly what `healthbench grade` gives for it: the unclipped task score
(length-adjusted where the data's official settings say so, as HealthBench Professional's), with the task's
per-axis scores. A reply one of whose items cannot be graded gets no reward: its `Reward` carries the
`GradingError` naming task and item, and each caller turns that into what its framework defines (`None` in TRL,
an error in verl). A failure of the whole grader (an endpoint no waiting can cure, a quota spent) raises.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr, TypeAdapter, ValidationError

from healthbench.api.endpoint import Concurrency
from healthbench.data.schema import Row
from healthbench.data.source import TaskSource
from healthbench.errors import GradingError, SettingsError, UnknownTask
from healthbench.grading.sample import grade_sample
from healthbench.grading.settings import GraderConfig, GradingOptions
from healthbench.integrations.common import source_tasks
from healthbench.integrations.openreward.deployment import served_budget
from healthbench.integrations.pool import GraderPool
from healthbench.together import together

DATA_VARIABLE = "HEALTHBENCH_DATA"
CONCURRENCY_VARIABLE = "HEALTHBENCH_GRADER_CONCURRENCY"
SLOW_START_VARIABLE = "HEALTHBENCH_GRADER_SLOW_START"  # serve's --grader-slow-start
ALL_ROWS = "none (all rows of the data)"  # how an unknown prompt_id's error names no split
EXIT_WAIT = 5.0  # seconds the graders of a trainer's loop may take to close as the process exits


@dataclass(frozen=True)
class Reward:
    """One reply's reward: the signed task score and its per-axis scores (`axis:accuracy`, ...), or, for a reply
    that could not be graded, no reward and the `error` naming task and item (`failure`, the error itself, where
    it was graded in this process)."""

    prompt_id: str
    reward: float | None
    axes: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    failure: GradingError | None = field(default=None, compare=False)


@dataclass(frozen=True)
class TaskRows:
    """The rows a step's prompt_ids are looked up in, what they are (the kind whose official settings apply), and
    the split they are (`ALL_ROWS` when none was chosen)."""

    by_id: Mapping[str, Row]
    kind: str | None
    split: str

    def row(self, prompt_id: str) -> Row:
        """The row of `prompt_id`; `UnknownTask` naming it and the split when there is none."""
        row = self.by_id.get(prompt_id) if isinstance(prompt_id, str) else None
        if row is None:
            raise UnknownTask(prompt_id, self.split)
        return row


def task_rows(
    data: str | Path | None = None, split: str | None = None, heldout: str | Path | None = None, seed: int = 0
) -> TaskRows:
    """The rows of `data` (a file's path, or a subset's name: `TaskSource.given`), else of `HEALTHBENCH_DATA`, else
    of the full set; of `split` only when one is named (`data.splits`, as `export` and `--split` choose it: the full
    set's heldout is the official hard file, a file's the rows of `heldout` when given, else a seeded 20%; `seed`
    is the split's). Loaded once per process for the same data, split, heldout and seed."""
    named = data if data is not None else os.environ.get(DATA_VARIABLE, "").strip() or None
    return _task_rows(TaskSource.chosen(named, split=split, heldout=heldout, seed=seed))


@functools.lru_cache(maxsize=16)
def _task_rows(source: TaskSource) -> TaskRows:
    tasks = source_tasks(source)
    return TaskRows({row.prompt_id: row for row in tasks.rows}, tasks.kind, source.split or ALL_ROWS)


def budget_from_env(concurrency: int | None) -> int | None:
    """The grader budget given, else `HEALTHBENCH_GRADER_CONCURRENCY`'s, checked against the range of `--concurrency`
    (None: serve's default)."""
    given: Any = concurrency
    where = "`concurrency`"
    if given is None:
        said = os.environ.get(CONCURRENCY_VARIABLE, "").strip()
        if not said:
            return None
        given, where = said, CONCURRENCY_VARIABLE
    try:
        return TypeAdapter(Concurrency).validate_python(given, strict=False)
    except ValidationError as exc:
        raise SettingsError(f"{where} is {given!r}: {exc.errors()[0]['msg']}") from None


def slow_start_from_env(slow_start: bool | None) -> bool:
    """`slow_start` if given, else `HEALTHBENCH_GRADER_SLOW_START`'s (unset: no slow start, as `serve`)."""
    if slow_start is not None:
        return slow_start
    said = os.environ.get(SLOW_START_VARIABLE, "").strip()
    if not said:
        return False
    try:
        return TypeAdapter(bool).validate_python(said, strict=False)
    except ValidationError as exc:
        raise SettingsError(f"{SLOW_START_VARIABLE} is {said!r}: {exc.errors()[0]['msg']}") from None


@functools.cache
def _pool(concurrency: int, ceiling: int, slow_start: bool) -> GraderPool:
    """The process's graders of one budget: every step, every source of rows, every loop draws on it."""
    pool = GraderPool(concurrency, ceiling, slow_start=slow_start)
    _pools.append(pool)
    return pool


_pools: list[GraderPool] = []


async def close_graders() -> None:
    """Close the running loop's graders (those of every budget): for a loop that will not end by itself, such as
    one a caller keeps and runs step by step."""
    for pool in _pools:
        await pool.aclose()


_closing: set[tuple[int, int]] = set()  # the (loop, pool) pairs whose graders are closed as the process exits


def _close_at_exit(pool: GraderPool) -> None:
    """Close the running loop's graders of `pool` as the process exits, if that loop is still running then: a
    trainer's loop in a daemon thread (TRL's, verl.py's) is never ended, only stopped at exit, and its open HTTP
    sessions would be reported unclosed. Registered from the loop itself, on its first step, so it runs before a
    trainer's own exit hook (registered earlier) stops the loop. A loop that ends first (`asyncio.run`) closes them
    itself (`GraderPool`)."""
    loop = asyncio.get_running_loop()
    if (id(loop), id(pool)) in _closing:
        return
    _closing.add((id(loop), id(pool)))

    def close() -> None:
        if loop.is_running() and not loop.is_closed():
            with contextlib.suppress(Exception):  # at exit, a grader that will not close is not worth a traceback
                asyncio.run_coroutine_threadsafe(pool.aclose(), loop).result(EXIT_WAIT)

    atexit.register(close)


class BatchRewards:
    """Grades a step's (prompt_id, reply) pairs at once (see the module docstring).

    `grading` holds `GradingOptions` fields (`grader_model=...`, `grader_base_url=...`, `grader_rpm=...`);
    `grader_api_key` the grader's key, else the environment's as `serve` reads it. A key whose limits are not known
    yet is sent the step's calls at once, within the budget, unless `slow_start` (else `HEALTHBENCH_GRADER_SLOW_START`;
    see `ApiClient`): a step is such a burst anyway, and the slow start would put the first step's rewards off by
    four or five grader rounds.
    """

    def __init__(
        self,
        data: str | Path | None = None,
        *,
        split: str | None = None,
        heldout: str | Path | None = None,
        seed: int = 0,
        concurrency: int | None = None,
        grader_api_key: str | None = None,
        slow_start: bool | None = None,
        **grading: Any,
    ) -> None:
        self.tasks = task_rows(data, split, heldout, seed)
        try:
            options = GradingOptions(grader_concurrency=budget_from_env(concurrency), **grading)
        except ValidationError as exc:
            said = "; ".join(f"`{error['loc'][0]}`: {error['msg']}" for error in exc.errors())
            raise SettingsError(said) from None
        plan = options.plan(self.tasks.kind, served=True)
        config = plan.grader
        if grader_api_key:
            config = config.model_copy(update={"api_key": SecretStr(grader_api_key)})
        config.check_pace_store()  # a shared pace out of reach: an error now, not a key overrun later
        self.config: GraderConfig = config
        self.adjustment = plan.length_adjustment
        self.concurrency, self.ceiling = served_budget([config])
        self._graders = _pool(self.concurrency, self.ceiling, slow_start_from_env(slow_start))

    async def grade(self, items: Sequence[tuple[str, str]]) -> list[Reward]:
        """Every reply's reward, in order, all graded at once under the one budget. `UnknownTask` before any
        grader call for a prompt_id not among the rows; a reply that cannot be graded gets a `Reward` without one."""
        rows = [self.tasks.row(prompt_id) for prompt_id, _ in items]
        if not rows:
            return []
        _close_at_exit(self._graders)
        async with self._graders.lease(self.config) as grader:
            # A failure of the whole grader, or a cancellation from outside: no grader call outlives the step.
            return await together(self._one(grader, row, reply) for row, (_, reply) in zip(rows, items, strict=True))

    async def _one(self, grader: Any, row: Row, reply: str) -> Reward:
        try:
            sample = await grade_sample(grader, row, reply, adjustment=self.adjustment)
        except GradingError as exc:
            # An endpoint may echo the key in an error body, and the error is logged.
            failure = exc.redacted(self.config.api_key.get_secret_value() if self.config.api_key else None)
            return Reward(row.prompt_id, None, error=str(failure), failure=failure)
        return Reward(row.prompt_id, sample.reward, sample.axes)


def axis_means(rewards: Sequence[Reward]) -> dict[str, float]:
    """Each axis's mean score over the rewards that have it (the graded replies whose task scores that axis)."""
    sums: dict[str, list[float]] = {}
    for reward in rewards:
        for axis, value in reward.axes.items():
            sums.setdefault(axis, []).append(value)
    return {axis: sum(values) / len(values) for axis, values in sorted(sums.items())}
