"""Where a trainer's rewards take their rows, their grader budget and their warm graders from, in this process or in
`serve`: the arguments given, else the environment variables `serve` reads.

- Rows: `data` (a file's path, or a subset's name), else `HEALTHBENCH_DATA`, else the full set; of one split when
  one is named (`data.splits`, as `export` and `--split` choose it), read as `TaskSource.chosen` reads them, and
  loaded once per process for the same data, split, heldout and seed.
- Budget: `serve`'s (`served_budget`): 256 grader calls in flight, growing with the key's limits up to 1,024; a
  concurrency given (the argument, else `HEALTHBENCH_GRADER_CONCURRENCY`) is a ceiling the budget stays at.
- Settings: checked here, before any step (`grading_options`, `checked_grader`): a setting that is none (a
  misspelling) or out of range, a grader endpoint that is not a URL, no key for OpenAI's API.
- Graders: one `GraderPool` per budget in the process, shared by every source of rows on that budget, so graders
  stay warm across steps as long as the caller's event loop lives (a trainer's: TRL's daemon loop, verl's reward
  loop, or `verl.py`'s own); a key whose limits are not known yet is sent a step's calls at once unless the slow
  start is asked for (the argument, else `HEALTHBENCH_GRADER_SLOW_START`, as `serve --grader-slow-start`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import difflib
import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from healthbench.api.endpoint import Concurrency, is_http_url, is_openai
from healthbench.data.schema import Row
from healthbench.data.source import TaskSource
from healthbench.errors import SettingsError, UnknownTask
from healthbench.grading.settings import SERVED_KEY_VARIABLES, GraderConfig, GradingOptions
from healthbench.integrations.common import source_tasks
from healthbench.integrations.openreward.access import ReplyChars
from healthbench.integrations.pool import GraderPool

DATA_VARIABLE = "HEALTHBENCH_DATA"
CONCURRENCY_VARIABLE = "HEALTHBENCH_GRADER_CONCURRENCY"
SLOW_START_VARIABLE = "HEALTHBENCH_GRADER_SLOW_START"  # serve's --grader-slow-start
ALL_ROWS = "none (all rows of the data)"  # how an unknown prompt_id's error names no split
EXIT_WAIT = 5.0  # seconds the graders of a trainer's loop may take to close as the process exits
# A server's grader budget, unless --concurrency says otherwise: every session's calls share it, and a GRPO group
# of 8 replies with a dozen rubric items each is about 100 calls at once (the grading commands start at 64). It
# grows past this as the keys' limits and the latency need (up to `max_concurrency`), and never holds back more
# than the pace does: the pace, not the budget, keeps the calls under a key's limits.
SERVED_CONCURRENCY = 256


@dataclass(frozen=True)
class TaskRows:
    """The rows a step's prompt_ids are looked up in, what they are (the kind whose official settings apply; None
    where the caller chose the settings itself, as `serve` does per split), and the split they are (`ALL_ROWS` when
    none was chosen)."""

    by_id: Mapping[str, Row]
    kind: str | None
    split: str

    def row(self, prompt_id: object) -> Row:
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


def served_budget(configs: Iterable[GraderConfig]) -> tuple[int, int]:
    """The one grader budget of a server grading with `configs`, and of the in-process rewards, which grade as it
    does: calls in flight at first, and the most it grows to as the keys' limits are learned."""
    configs = list(configs)
    ceilings = [config.max_concurrency for config in configs if config.max_concurrency is not None]
    # A concurrency given is a ceiling the budget stays at; left to its default, a server's starts higher.
    floors = [
        config.concurrency if config.max_concurrency is None else max(config.concurrency, SERVED_CONCURRENCY)
        for config in configs
    ]
    return max(floors), max([*ceilings, *floors])


def grading_options(concurrency: int | None, grading: Mapping[str, Any], others: Iterable[str]) -> GradingOptions:
    """The `GradingOptions` of the settings given (`grading`), the budget `concurrency` else the environment's;
    `SettingsError` naming each setting that is no setting (with the closest of the options' fields and `others`,
    the caller's own settings, when one is close) or whose value is out of its range."""
    try:
        return GradingOptions(grader_concurrency=budget_from_env(concurrency), **grading)
    except ValidationError as exc:
        known = [*GradingOptions.model_fields, *others]
        said = []
        for error in exc.errors():
            name = str(error["loc"][0])
            if error["type"] == "extra_forbidden":
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean `{close[0]}`?)" if close else ""
                said.append(
                    f"`{name}` is no setting of the reward{hint}: its settings are GradingOptions' fields "
                    f"(grader_model, grader_base_url, ...) and {', '.join(others)}"
                )
            else:
                said.append(f"`{name}` is {error['input']!r}: {error['msg']}")
        raise SettingsError("; ".join(said)) from None


def checked_grader(config: GraderConfig) -> GraderConfig:
    """`config`, once it is known to be usable before any grader call: its endpoint a URL (http:// or https://, then
    a host) and, for OpenAI's API, a key; else `SettingsError` naming the setting and the variable that give it.
    Its shared pace's store is reached too (`PaceStoreUnreachable`): an error now, not a key overrun later."""
    for url in config.base_urls:
        if not is_http_url(url):
            pool = f" (of the pool {config.base_url!r})" if len(config.base_urls) > 1 else ""
            raise SettingsError(
                f"the grader's endpoint {url!r}{pool} is not a URL (it needs http:// or https://, then a host): give "
                "`grader_base_url`, or set HEALTHBENCH_GRADER_BASE_URL"
            )
    if config.api_key is None and is_openai(config.base_url):
        raise SettingsError(
            f"no grader key, and the grader {config.model} at {config.base_url} needs one: give `grader_api_key`, "
            f"or set one of {', '.join(SERVED_KEY_VARIABLES)}"
        )
    config.check_pace_store()
    return config


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


def reply_bound(most: object) -> int:
    """The longest reply graded, `max_reply_chars`, checked against the range of `serve --max-reply-chars`."""
    try:
        return TypeAdapter(ReplyChars).validate_python(most, strict=True)
    except ValidationError as exc:
        raise SettingsError(f"`max_reply_chars` is {most!r}: {exc.errors()[0]['msg']}") from None


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
def budget_pool(concurrency: int, ceiling: int, slow_start: bool) -> GraderPool:
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


def close_at_exit(pool: GraderPool) -> None:
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
