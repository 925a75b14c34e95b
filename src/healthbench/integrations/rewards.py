"""A training step's rewards in one grader round: every reply of the step graded at once, as `healthbench grade`
grades each. `BatchRewards` is the one way a step is graded: in this process (the TRL reward function and the verl
reward file are thin layers over it) and behind `serve`'s batch routes (`/rewards`, `/openrlhf`).

A step's replies name their task by `prompt_id`, looked up in the rows before any grader call: one not among them
is `UnknownTask`, naming it and the split. In this process, the rows, the budget and the graders come from the
arguments, else the environment variables `serve` reads (`rewardsetup`); the grader is `serve`'s, its settings from
the arguments, else those variables (`GradingOptions.plan(..., served=True)`: `HEALTHBENCH_GRADER_API_KEY`,
`HEALTHBENCH_GRADER_BASE_URL`, `HEALTHBENCH_GRADER_MODEL`, the SDK's `CHAT_*`, never `OPENAI_BASE_URL`), its pace
shared through `HEALTHBENCH_PACE_STORE=redis://...` with every process naming it (many trainer ranks or Ray workers
of one key pace as `serve` replicas do). Behind the routes, they are the server's: a split's rows, its settings and
length adjustment, the server's own key, its one budget and its warm graders.

Each reply's reward is `grade_sample`'s, exactly what `healthbench grade` gives for it: the unclipped task score
(length-adjusted where the data's official settings say so, as HealthBench Professional's), with the task's
per-axis scores. A reply one of whose items cannot be graded gets no reward: its `Reward` carries the
`GradingError` naming task and item, and each caller turns that into what its framework defines (`None` in TRL,
an error in verl, a null reward in `/rewards`, a failed request in `/openrlhf`). A failure of the whole grader (an
endpoint no waiting can cure, a quota spent) raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError

from healthbench.data.schema import Row
from healthbench.errors import GradingError, OverLimit, SettingsError
from healthbench.grading.sample import GradedSample, grade_sample
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig, GradingOptions
from healthbench.integrations.pool import GraderPool
from healthbench.integrations.rewardsetup import (
    TaskRows,
    budget_from_env,
    budget_pool,
    close_at_exit,
    close_graders,
    served_budget,
    slow_start_from_env,
    task_rows,
)
from healthbench.runs.outputs import RewardResult
from healthbench.together import together

__all__ = ["BatchRewards", "Reward", "axis_means", "close_graders", "grade_reply", "task_rows"]


@dataclass(frozen=True)
class Reward:
    """One reply's reward: the signed task score and its per-axis scores (`axis:accuracy`, ...), or, for a reply
    that could not be graded, no reward and the `error` naming task and item (`failure`, the error itself, where
    it was graded in this process)."""

    prompt_id: str
    reward: float | None
    axes: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    failure: GradingError | OverLimit | None = field(default=None, compare=False)

    def result(self) -> RewardResult:
        """The reward as `/rewards` answers it."""
        return RewardResult(prompt_id=self.prompt_id, reward=self.reward, error=self.error, axes=self.axes)

    @classmethod
    def of(cls, result: RewardResult) -> Reward:
        """The reward a `/rewards` answer's result says (its failure known only by its words)."""
        if result.reward is None:
            return cls(result.prompt_id, None, result.axes, error=result.error or "no reward")
        return cls(result.prompt_id, result.reward, result.axes)


async def grade_reply(
    graders: GraderPool, config: GraderConfig, row: Row, reply: str, adjustment: LengthAdjustment | None
) -> GradedSample:
    """`reply` graded as the reply to `row` with the warm grader of `config` (its key included) that `graders`
    keeps, as `healthbench grade` grades it (`grade_sample`). Its `GradingError` comes without the key, which an
    endpoint may echo in an error body and which would end up in a log."""
    key = config.api_key.get_secret_value() if config.api_key is not None else None
    async with graders.lease(config) as grader:
        try:
            return await grade_sample(grader, row, reply, adjustment=adjustment)
        except GradingError as exc:
            raise exc.redacted(key) from None


class BatchRewards:
    """Grades a step's (prompt_id, reply) pairs at once (see the module docstring).

    Made from settings, in this process: the rows of `data`, `split`, `heldout` and `seed` (see
    `rewardsetup.task_rows`); `grading` holds `GradingOptions` fields (`grader_model=...`, `grader_base_url=...`,
    `grader_rpm=...`); `grader_api_key` the grader's key, else the environment's as `serve` reads it; `concurrency`
    the budget (else `HEALTHBENCH_GRADER_CONCURRENCY`, else serve's). A key whose limits are not known yet is sent
    the step's calls at once, within the budget, unless `slow_start` (else `HEALTHBENCH_GRADER_SLOW_START`; see
    `ApiClient`): a step is such a burst anyway, and the slow start would put the first step's rewards off by a few
    grader rounds. Bad data or settings fail here, before any step. `served` makes one of a server's splits.
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
        tasks = task_rows(data, split, heldout, seed)
        try:
            options = GradingOptions(grader_concurrency=budget_from_env(concurrency), **grading)
        except ValidationError as exc:
            said = "; ".join(f"`{error['loc'][0]}`: {error['msg']}" for error in exc.errors())
            raise SettingsError(said) from None
        plan = options.plan(tasks.kind, served=True)
        config = plan.grader
        if grader_api_key:
            config = config.model_copy(update={"api_key": SecretStr(grader_api_key)})
        config.check_pace_store()  # a shared pace out of reach: an error now, not a key overrun later
        concurrency, ceiling = served_budget([config])
        graders = budget_pool(concurrency, ceiling, slow_start_from_env(slow_start))
        self._bind(tasks, config, plan.length_adjustment, graders, in_process=True)

    @classmethod
    def served(
        cls,
        tasks: TaskRows,
        config: GraderConfig,
        adjustment: LengthAdjustment | None,
        graders: GraderPool,
        *,
        reply_chars: int,
        on_graded: Callable[[GradedSample], None] | None = None,
    ) -> BatchRewards:
        """The batch rewards of one split a server serves: its rows, its grader settings (the server's key) and
        length adjustment, the server's graders (`graders`, of its one budget), its bound on a reply's length
        (`--max-reply-chars`); `on_graded` is told of each reply graded (the server's usage log)."""
        rewards = cls.__new__(cls)
        rewards._bind(
            tasks, config, adjustment, graders, in_process=False, reply_chars=reply_chars, on_graded=on_graded
        )
        return rewards

    def _bind(
        self,
        tasks: TaskRows,
        config: GraderConfig,
        adjustment: LengthAdjustment | None,
        graders: GraderPool,
        *,
        in_process: bool,
        reply_chars: int | None = None,
        on_graded: Callable[[GradedSample], None] | None = None,
    ) -> None:
        self.tasks = tasks
        self.config = config
        self.adjustment = adjustment
        self.concurrency, self.ceiling = served_budget([config])
        self.reply_chars = reply_chars
        self._graders = graders
        # A trainer's loop is only stopped at exit (its graders closed then); a server's loop ends and closes its own.
        self._in_process = in_process
        self._on_graded = on_graded

    async def grade(self, items: Sequence[tuple[str, str]]) -> list[Reward]:
        """Every reply's reward, in order, all graded at once under the one budget. `UnknownTask` before any
        grader call for a prompt_id not among the rows; a reply that cannot be graded gets a `Reward` without one."""
        rows = [self.tasks.row(prompt_id) for prompt_id, _ in items]
        if not rows:
            return []
        if self._in_process:
            close_at_exit(self._graders)
        # A failure of the whole grader, or a cancellation from outside: no grader call outlives the step.
        return await together(self._one(row, reply) for row, (_, reply) in zip(rows, items, strict=True))

    async def _one(self, row: Row, reply: str) -> Reward:
        if self.reply_chars is not None and len(reply) > self.reply_chars:
            refused = OverLimit.reply(row.prompt_id, len(reply), self.reply_chars)
            return Reward(row.prompt_id, None, error=str(refused), failure=refused)
        try:
            sample = await grade_reply(self._graders, self.config, row, reply, self.adjustment)
        except GradingError as exc:
            return Reward(row.prompt_id, None, error=str(exc), failure=exc)
        if self._on_graded is not None:
            self._on_graded(sample)
        return Reward(row.prompt_id, sample.reward, sample.axes)


def axis_means(rewards: Sequence[Reward]) -> dict[str, float]:
    """Each axis's mean score over the rewards that have it (the graded replies whose task scores that axis)."""
    sums: dict[str, list[float]] = {}
    for reward in rewards:
        for axis, value in reward.axes.items():
            sums.setdefault(axis, []).append(value)
    return {axis: sum(values) / len(values) for axis, values in sorted(sums.items())}
