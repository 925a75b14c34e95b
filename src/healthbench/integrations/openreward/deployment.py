"""What one OpenReward server serves: its rows by split, the task prompt, and the grading every session of
the server shares (one grader per key and settings, kept warm between sessions by `integrations.pool`, under one
concurrency budget), for one reply or for a group of candidates. Nothing here imports the SDK, so it can be built
and tested without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from healthbench.api.endpoint import is_openai
from healthbench.api.wire import Usage
from healthbench.data.cache import Transfer, unseen
from healthbench.data.schema import Message, Row
from healthbench.data.source import TaskSource
from healthbench.data.splits import SPLITS
from healthbench.errors import CandidateError, DataError, GradingError, OverLimit, SettingsError, UnknownTask
from healthbench.grading.prompt import TEMPLATE_SHA256, render_conversation
from healthbench.grading.sample import GradedSample
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig
from healthbench.integrations.openreward.access import ServeLimits
from healthbench.integrations.openreward.usagelog import UsageLog
from healthbench.integrations.pool import GraderPool
from healthbench.integrations.rewards import BatchRewards, grade_reply
from healthbench.integrations.rewardsetup import TaskRows, served_budget
from healthbench.runs.outputs import RewardItem, RewardMetadata
from healthbench.runs.spec import GraderRequest
from healthbench.together import together

EXPLANATION_CHARS = 200
MULTI_TURN_INSTRUCTION = "Write the assistant's reply to the final user turn of this conversation."
# The environments one server serves: the SDK's terminal-tool design, and the variant for harnesses that only
# call listed tools (inspect-openreward, firehorse, TRL, OpenReward's cookbook loops).
ENVIRONMENT = "healthbench"
ANSWER_ENVIRONMENT = "healthbench_answer"
ENVIRONMENTS = (ENVIRONMENT, ANSWER_ENVIRONMENT)
# The one sentence the answer-tool variant adds to a task's prompt.
ANSWER_INSTRUCTION = "Send your reply to the user by calling the `answer` tool with it."
ANSWER_SUFFIX = "\n\n" + ANSWER_INSTRUCTION
# The split of the full set (or of a file served): every task, the environment's one published split.
TEST = "test"


def prompt_text(messages: Sequence[Message]) -> str:
    """The task as one block of text: a lone message verbatim, else an instruction and the rendered turns."""
    if len(messages) == 1:
        return messages[0].content
    return MULTI_TURN_INSTRUCTION + "\n\n" + render_conversation(messages)


def answer_prompt_text(messages: Sequence[Message]) -> str:
    """The answer-tool variant's prompt: the task's, then the sentence asking for the `answer` tool."""
    return prompt_text(messages) + ANSWER_SUFFIX


def _subsets(data: Path | None, subsets: Sequence[str]) -> Sequence[str]:
    """The subsets served: those given, else the full set unless a file is."""
    return subsets if data is not None or subsets else ("full",)


def _split(subset: str) -> str:
    return TEST if subset == "full" else subset


def split_names(data: Path | None = None, subsets: Sequence[str] = ()) -> list[str]:
    """The splits `load_splits` serves for `data` and `subsets`, in order, known before anything is read (a
    training split too few rows leave empty is not served). `SettingsError` for a split given twice."""
    names = [TEST] if data is not None else []
    for split in map(_split, _subsets(data, subsets)):
        if split in names:
            raise SettingsError(f"split {split!r} given twice (a data file and the full subset are both 'test')")
        names.append(split)
    if TEST in names:
        at = names.index(TEST) + 1
        names[at:at] = SPLITS
    return names


def load_splits(
    data: Path | None = None,
    subsets: Sequence[str] = (),
    transfer: Transfer = unseen,
    *,
    heldout: Path | None = None,
    split_seed: int = 0,
) -> dict[str, list[Row]]:
    """The rows to serve by split: a JSONL file or the `full` subset is `test`, and its training splits
    (`data.splits`) are `train`, `validation` and `heldout` beside it (for the full set, `heldout` is HealthBench
    Hard; for a file, the rows of the file `heldout`, else a seeded 20%; `split_seed` seeds the choice); `hard`,
    `consensus` and `professional` keep their names.

    With neither a file nor a subset, the full set is served; a download is shown through `transfer`. A training
    split that too few rows leave empty is not served.
    """
    split_names(data, subsets)  # a split given twice: refused before anything is read
    splits: dict[str, list[Row]] = {}
    sources = [(TEST, TaskSource.file(data))] if data is not None else []
    sources += [(_split(name), TaskSource.named(name)) for name in _subsets(data, subsets)]
    for served, source in sources:
        rows = source.all_rows(transfer)
        splits[served] = rows
        if source.splittable:
            parts = source.splitting(None, heldout, split_seed).splits(rows, transfer)
            splits |= {split: part for split, part in parts.items() if part}
    return splits


class Deployment:
    """What one server serves: rows by split, their task specs, and the grading all sessions share.

    `grader` is the settings of every split, or of each split by name; `adjustments` the length adjustment of
    a split whose reward is length-adjusted (none for a split not named); `usage_log` is told each graded
    reply's grader usage; `limits` bound a reply's length and a group's size.
    """

    def __init__(
        self,
        splits: Mapping[str, Sequence[Row]],
        grader: GraderConfig | Mapping[str, GraderConfig],
        adjustments: Mapping[str, LengthAdjustment | None] | None = None,
        usage_log: UsageLog | None = None,
        limits: ServeLimits | None = None,
        slow_start: bool = False,
    ) -> None:
        self.usage_log = usage_log
        self.limits = limits or ServeLimits()
        if not splits:
            raise SettingsError("nothing to serve: no splits")
        self.splits = {name: tuple(rows) for name, rows in splits.items()}
        self.graders = {name: grader if isinstance(grader, GraderConfig) else grader[name] for name in self.splits}
        self.adjustments = {name: (adjustments or {}).get(name) for name in self.splits}
        self._tasks: dict[str, TaskRows] = {}
        self._specs: dict[str, list[dict[str, str]]] = {}
        for name, rows in self.splits.items():
            if not rows:
                raise DataError(f"split {name!r} has no rows")
            by_id: dict[str, Row] = {}
            for row in rows:
                if row.prompt_id in by_id:
                    raise DataError(f"split {name!r}: duplicate prompt_id {row.prompt_id!r}")
                by_id[row.prompt_id] = row
            self._tasks[name] = TaskRows(by_id, None, name)
            # Built once: the SDK asks for the listing again on every request.
            self._specs[name] = [{"split": name, "prompt_id": row.prompt_id} for row in rows]
        self.concurrency, self.ceiling = served_budget(self.graders.values())
        # A trainer's step sends its rollouts at once: a key not known yet gets the budget at once, not a slow start.
        self._graders = GraderPool(self.concurrency, self.ceiling, slow_start=slow_start)
        self._rewards: dict[str, BatchRewards] = {}

    def budget_description(self) -> dict[str, Any]:
        """The grader budget and how long graders stay warm, for the server's start-up line."""
        return {
            "in_flight": self.concurrency,
            "growing_to": self.ceiling,
            "idle_grader_closes_after_s": self._graders.idle,
            "most_idle_graders": self._graders.most_idle,
            "slow_start": self._graders.slow_start,
        }

    def specs(self, split: str) -> list[dict[str, str]]:
        """The task specs of a split, in file order: small, the row stays on the server."""
        return self._specs[split]

    def row(self, task_spec: Mapping[str, Any]) -> Row:
        """The row a task spec names; `UnknownTask` for a spec that names none (naming the splits, for a split
        that is not one)."""
        split, prompt_id = task_spec.get("split"), task_spec.get("prompt_id")
        tasks = self._tasks.get(split) if isinstance(split, str) else None
        if tasks is None:
            raise UnknownTask(prompt_id, split, splits=tuple(self.splits))
        return tasks.row(prompt_id)

    def rewards(self, split: str) -> BatchRewards:
        """The batch rewards of `split` (a split served) for the batch routes: its rows, its settings and length
        adjustment, the server's own key, and the one budget and warm graders every session shares."""
        rewards = self._rewards.get(split)
        if rewards is None:
            rewards = BatchRewards.served(
                self._tasks[split],
                self.graders[split],
                self.adjustments[split],
                self._graders,
                reply_chars=self.limits.reply_chars,
                on_graded=self._used,
            )
            self._rewards[split] = rewards
        return rewards

    def missing_key(self, split: str) -> str | None:
        """Why a session that brings no grader key could never be graded on `split`, or None when it can be: the
        server has a key of its own, or its grader is not OpenAI's API (a local or self-hosted one may need none)."""
        config = self.graders[split]
        if config.api_key is not None or not is_openai(config.base_url):
            return None
        return (
            f"no grader key for this session, and the grader {config.model} at {config.base_url} needs one: send "
            "it as the session secret OPENAI_API_KEY (or chat_api_key), or start the server with "
            "HEALTHBENCH_GRADER_API_KEY set"
        )

    async def grade(self, split: str, row: Row, response: str, api_key: str | None) -> GradedSample:
        """Grade `response` as the reply to `row` with its split's settings (its length adjustment included)
        and the session's key (else the server's own).

        Raises `GradingError` when an item cannot be graded (the key never appears in its message), and
        `OverLimit`, before any grader call, for a reply longer than the server grades.
        """
        if len(response) > self.limits.reply_chars:
            raise OverLimit.reply(row.prompt_id, len(response), self.limits.reply_chars)
        config = self.graders[split]
        if not api_key and config.api_key is not None:
            api_key = config.api_key.get_secret_value()
        keyed = config.model_copy(update={"api_key": SecretStr(api_key) if api_key else None})
        sample = await grade_reply(self._graders, keyed, row, response, self.adjustments[split])
        self._used(config.model, sample.paid, 0)
        return sample

    def _used(self, model: str, paid: Usage, reused: int) -> None:
        """Count a reply graded by `model` in the server's usage log: what its grading paid, and the calls whose
        verdicts it reused (the batch routes' `reuse`)."""
        if self.usage_log is not None:
            self.usage_log.add(model, paid, reused=reused)

    async def grade_group(
        self, split: str, row: Row, replies: Sequence[str | None], api_key: str | None
    ) -> list[GradedSample]:
        """Grade each of a group's candidate replies to `row` as `grade` grades one, all at once under the
        server's one budget; the samples come back index-aligned.

        A group of more candidates than the server scores at once raises `OverLimit`, and a candidate without a
        reply (None) or with one too long raises `CandidateError` naming its index, both before any grader call;
        a candidate that cannot be graded stops the others and raises `CandidateError` too: there is no score for
        the group then, not even for the candidates that were graded.
        """
        if len(replies) > self.limits.group_size:
            raise OverLimit.group(len(replies), self.limits.group_size)
        texts: list[str] = []
        for index, reply in enumerate(replies):
            if reply is None:
                raise CandidateError(index, "it has no assistant text to grade")
            if (refusal := self._too_long(reply)) is not None:
                raise CandidateError(index, refusal)
            texts.append(reply)
        if not texts:
            return []

        async def candidate(index: int, text: str) -> GradedSample:
            try:
                return await self.grade(split, row, text, api_key)
            except GradingError as exc:
                raise CandidateError(index, str(exc)) from exc

        # The first failure stops the others and awaits them, as does a cancellation from outside: no grader call
        # outlives the request.
        return await together(candidate(index, text) for index, text in enumerate(texts))

    def _too_long(self, reply: str) -> str | None:
        """Why `reply` is not graded for its length, or None."""
        if len(reply) <= self.limits.reply_chars:
            return None
        return OverLimit.reply_cause(len(reply), self.limits.reply_chars)

    def metadata(self, split: str, sample: GradedSample) -> dict[str, Any]:
        """What a graded reply's tool output carries besides its reward (`RewardMetadata`, as the SDK takes it:
        a plain object); the reward is the grader's whatever `suspect` says."""
        config, adjustment = self.graders[split], self.adjustments[split]
        items = [RewardItem.of(item, EXPLANATION_CHARS) for item in sample.items]
        record = RewardMetadata(
            prompt_id=sample.row.prompt_id,
            items=items,
            metrics=dict(sample.metrics),
            score=sample.score,
            length_adjusted_score=sample.adjusted,
            length_adjustment=None if adjustment is None else adjustment.as_dict(),
            grader_model=config.model,
            grader_request=GraderRequest.model_validate(config.request_settings()),
            template_sha256=TEMPLATE_SHA256,
            grader_calls=config.calls,
            per_reply_template_sha256=config.per_reply_template_sha256,
            # Tokens and calls, as a client compares two gradings by: not the time the calls spent on the wire.
            usage=dataclasses.replace(sample.usage, wire_microseconds=0).as_dict(),
            suspect=list(sample.suspect),
        )
        return record.model_dump(mode="json")


def summary(sample: GradedSample) -> str:
    """The tool output's text: how many items were graded and the scores."""
    adjusted = "" if sample.adjusted is None else f", length-adjusted {sample.adjusted:.4f}"
    return f"Graded against {len(sample.items)} rubric items: score {sample.score:.4f}{adjusted}."
