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

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from healthbench.api.wire import Usage
from healthbench.data.schema import Row
from healthbench.errors import GradingError, NotAReply, OverLimit
from healthbench.grading.sample import GradedSample, grade_sample
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig
from healthbench.grading.verdict import VerdictCache
from healthbench.integrations.openreward.access import MAX_REPLY_CHARS
from healthbench.integrations.pool import GraderPool
from healthbench.integrations.reuse import Reuse
from healthbench.integrations.rewardsetup import (
    TaskRows,
    budget_pool,
    checked_grader,
    close_at_exit,
    close_graders,
    grading_options,
    reply_bound,
    served_budget,
    slow_start_from_env,
    task_rows,
)
from healthbench.runs.outputs import RewardResult
from healthbench.together import together

__all__ = ["BatchRewards", "Reward", "axis_means", "close_graders", "grade_reply", "reply_text", "task_rows"]


@dataclass(frozen=True)
class Reward:
    """One reply's reward: the signed task score and its per-axis scores (`axis:accuracy`, ...), or, for a reply
    that could not be graded, no reward and the `error` naming task and item (`failure`, the error itself, where
    it was graded in this process). `paid_calls` is the grader calls its grading paid for, `reused_calls` those
    whose verdicts it reused (`reuse`)."""

    prompt_id: str
    reward: float | None
    axes: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    failure: GradingError | OverLimit | None = field(default=None, compare=False)
    paid_calls: int = field(default=0, compare=False)
    reused_calls: int = field(default=0, compare=False)

    def result(self) -> RewardResult:
        """The reward as `/rewards` answers it."""
        return RewardResult(prompt_id=self.prompt_id, reward=self.reward, error=self.error, axes=self.axes)

    @classmethod
    def of(cls, result: RewardResult) -> Reward:
        """The reward a `/rewards` answer's result says (its failure known only by its words)."""
        if result.reward is None:
            return cls(result.prompt_id, None, result.axes, error=result.error or "no reward")
        return cls(result.prompt_id, result.reward, result.axes)


def reply_text(given: object, index: int = 0, prompt_id: object = None) -> str:
    """The reply `given` holds, as every trainer's reward takes one: its text, or a conversation's messages
    (TRL's conversational completions) whose last holds it as its content (text parts joined; none, for a message
    of tool calls only, is the empty reply). `NotAReply` naming its place in the step (`index`) and its task for
    anything else: None, a number, an empty list of messages, a message of another shape."""
    if isinstance(given, str):
        return given
    if isinstance(given, Sequence) and given and isinstance(given[-1], Mapping):
        content = given[-1].get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
        if content is None:
            return ""
    raise NotAReply(index, prompt_id, given)


async def grade_reply(
    graders: GraderPool,
    config: GraderConfig,
    row: Row,
    reply: str,
    adjustment: LengthAdjustment | None,
    *,
    verdicts: VerdictCache | None = None,
) -> GradedSample:
    """`reply` graded as the reply to `row` with the warm grader of `config` (its key included) that `graders`
    keeps, as `healthbench grade` grades it (`grade_sample`); with `verdicts`, a verdict kept there for the same
    grader request is reused, not asked again (the trainers' rewards only: `reuse`). Its `GradingError` comes
    without the key, which an endpoint may echo in an error body and which would end up in a log."""
    key = config.api_key.get_secret_value() if config.api_key is not None else None
    async with graders.lease(config) as grader:
        if verdicts is not None:
            grader = dataclasses.replace(grader, cache=verdicts)
        try:
            return await grade_sample(grader, row, reply, adjustment=adjustment)
        except GradingError as exc:
            raise exc.redacted(key) from None


# What the in-process rewards take besides `GradingOptions` fields and the rows: named by a setting's error.
_OWN_SETTINGS = ("concurrency", "grader_api_key", "slow_start", "max_reply_chars")
# How the in-process rewards' bound on a reply's length is named, in a reply's error.
REPLY_BOUND = "`max_reply_chars`"


class BatchRewards:
    """Grades a step's (prompt_id, reply) pairs at once (see the module docstring).

    Made from settings, in this process: the rows of `data`, `split`, `heldout` and `seed` (see
    `rewardsetup.task_rows`); `grading` holds `GradingOptions` fields (`grader_model=...`, `grader_base_url=...`,
    `grader_rpm=...`); `grader_api_key` the grader's key, else the environment's as `serve` reads it; `concurrency`
    the budget (else `HEALTHBENCH_GRADER_CONCURRENCY`, else serve's); `max_reply_chars` the longest reply graded,
    `serve`'s `--max-reply-chars` (50,000 characters by default). A key whose limits are not known yet is sent the
    step's calls at once, within the budget, unless `slow_start` (else `HEALTHBENCH_GRADER_SLOW_START`; see
    `ApiClient`): a step is such a burst anyway, and the slow start would put the first step's rewards off by a few
    grader rounds. Bad data or settings fail here, before any step: a setting that is none, a grader endpoint that
    is not a URL, no key for OpenAI's API (`rewardsetup.checked_grader`). `served` makes one of a server's splits.

    A reply sent again within the reuse window, or twice in a step, is not graded again (`reuse`): its verdicts are
    the ones already paid for, so the same text gets the same reward.
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
        max_reply_chars: int = MAX_REPLY_CHARS,
        **grading: Any,
    ) -> None:
        options = grading_options(concurrency, grading, _OWN_SETTINGS)
        most = reply_bound(max_reply_chars)
        tasks = task_rows(data, split, heldout, seed)
        plan = options.plan(tasks.kind, served=True)
        config = plan.grader
        if grader_api_key:
            config = config.model_copy(update={"api_key": SecretStr(grader_api_key)})
        checked_grader(config)
        concurrency, ceiling = served_budget([config])
        graders = budget_pool(concurrency, ceiling, slow_start_from_env(slow_start))
        self._bind(tasks, config, plan.length_adjustment, graders, in_process=True, reply_chars=most, bound=REPLY_BOUND)

    @classmethod
    def served(
        cls,
        tasks: TaskRows,
        config: GraderConfig,
        adjustment: LengthAdjustment | None,
        graders: GraderPool,
        *,
        reply_chars: int,
        on_graded: Callable[[str, Usage, int], None] | None = None,
    ) -> BatchRewards:
        """The batch rewards of one split a server serves: its rows, its grader settings (the server's key) and
        length adjustment, the server's graders (`graders`, of its one budget), its bound on a reply's length
        (`--max-reply-chars`); `on_graded` is told of each reply graded or reused, with the grader model, what its
        grading paid and the calls whose verdicts it reused (the server's usage log)."""
        rewards = cls.__new__(cls)
        rewards._bind(
            tasks,
            config,
            adjustment,
            graders,
            in_process=False,
            reply_chars=reply_chars,
            bound=OverLimit.SERVED_REPLY_BOUND,
            on_graded=on_graded,
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
        reply_chars: int,
        bound: str,
        on_graded: Callable[[str, Usage, int], None] | None = None,
    ) -> None:
        self.tasks = tasks
        self.config = config
        self.adjustment = adjustment
        self.concurrency, self.ceiling = served_budget([config])
        self.reply_chars = reply_chars
        self._bound = bound  # the setting a reply's bound is, as its error names it
        self._graders = graders
        # A trainer's loop is only stopped at exit (its graders closed then); a server's loop ends and closes its own.
        self._in_process = in_process
        self._on_graded = on_graded
        # What this grader's trainer rewards paid for, kept for the same replies sent again (`reuse`).
        self.reuse = Reuse()

    async def grade(self, items: Sequence[tuple[object, object]]) -> list[Reward]:
        """Every reply's reward, in order, all graded at once under the one budget. Before any grader call:
        `UnknownTask` for a prompt_id not among the rows, `NotAReply` for what is not a reply (`reply_text`); a
        reply longer than the bound gets a `Reward` without one (`OverLimit`), as does a reply that cannot be
        graded (`GradingError`)."""
        rows = [self.tasks.row(prompt_id) for prompt_id, _ in items]
        replies = [reply_text(reply, index, prompt_id) for index, (prompt_id, reply) in enumerate(items)]
        if not rows:
            return []
        if self._in_process:
            close_at_exit(self._graders)
        # A failure of the whole grader, or a cancellation from outside: no grader call outlives the step.
        return await together(self._one(row, reply) for row, reply in zip(rows, replies, strict=True))

    async def _one(self, row: Row, reply: str) -> Reward:
        if len(reply) > self.reply_chars:
            refused = OverLimit.reply(row.prompt_id, len(reply), self.reply_chars, self._bound)
            return Reward(row.prompt_id, None, error=str(refused), failure=refused)
        try:
            sample, joined = await self.reuse.shared((row.prompt_id, reply), lambda: self._graded(row, reply))
        except GradingError as exc:
            return Reward(row.prompt_id, None, error=str(exc), failure=exc)
        paid = 0 if joined else sample.paid.calls
        reused = sample.usage.calls - paid
        if joined and self._on_graded is not None:
            self._on_graded(self.config.model, Usage(), reused)
        return Reward(row.prompt_id, sample.reward, sample.axes, paid_calls=paid, reused_calls=reused)

    async def _graded(self, row: Row, reply: str) -> GradedSample:
        """`reply` graded once for every request that asks for it meanwhile, its verdicts kept for those after."""
        sample = await grade_reply(
            self._graders, self.config, row, reply, self.adjustment, verdicts=self.reuse.verdicts
        )
        if self._on_graded is not None:
            self._on_graded(self.config.model, sample.paid, sample.usage.calls - sample.paid.calls)
        return sample


def axis_means(rewards: Sequence[Reward]) -> dict[str, float]:
    """Each axis's mean score over the rewards that have it (the graded replies whose task scores that axis)."""
    sums: dict[str, list[float]] = {}
    for reward in rewards:
        for axis, value in reward.axes.items():
            sums.setdefault(axis, []).append(value)
    return {axis: sum(values) / len(values) for axis, values in sorted(sums.items())}
