"""HealthBench as a verifiers environment, graded by this project's grader (`pip install healthbench[verifiers]`).

verifiers finds a taskset by importing the package its id names and taking the `Taskset` (and `Env`) it
exports, so `vf-eval healthbench` loads `HealthBenchTaskset` from `healthbench` itself; `load_environment(...)`
builds the same environment from keyword arguments, for prime-rl and scripts. Each task's prompt is the
role-tagged conversation; the episode is single-turn (the `null` harness, in a subprocess runtime, unless the
run pins another) and its reply is graded item by item with the reference's prompt and verdict rules, through
one grader per process. The reward is the unclipped task score (length-adjusted when asked); the task's
metric dict and every verdict go into `trace.info["healthbench"]`. An item that cannot be graded raises, so
verifiers records the rollout as failed (a `TaskError` on the trace, `ok` false, no reward), never as 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import verifiers.v1 as vf  # type: ignore[import-untyped, import-not-found, unused-ignore]
from verifiers.v1.harnesses.null import NullHarnessConfig  # type: ignore[import-untyped, import-not-found, unused-ignore]

from healthbench.data.schema import Message, Row
from healthbench.grading.sample import grade_sample
from healthbench.grading.settings import GradingOptions
from healthbench.integrations.common import GRADERS, load_tasks, sized
from healthbench.runs.records import SampleRecord

__all__ = [
    "HealthBenchConfig",
    "HealthBenchData",
    "HealthBenchEnv",
    "HealthBenchEnvConfig",
    "HealthBenchTask",
    "HealthBenchTaskConfig",
    "HealthBenchTaskset",
    "load_environment",
]

TASKSET_ID = "healthbench"
INFO_KEY = "healthbench"
_MESSAGE_TYPES = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}


class HealthBenchTaskConfig(vf.TaskConfig, GradingOptions):  # type: ignore[misc]
    """How replies are graded (`--env.taskset.task.*`): the `GradingOptions` fields, for the taskset's subset."""

    subset: str | None = None


class HealthBenchData(vf.TaskData):  # type: ignore[misc]
    """One task on the wire: the row itself (so any worker can grade it) and which repeat this is."""

    row: dict[str, Any]
    repeat: int = 0


def _reply(trace: Any) -> str:
    """The reply to grade, as the model wrote it (verifiers' `last_reply` strips whitespace; the reference
    grades the reply verbatim)."""
    if trace.root_reply is not None:
        return str(trace.root_reply)
    replies = trace.assistant_messages
    return (replies[-1].content or "") if replies else ""


class HealthBenchTask(vf.Task[HealthBenchData, vf.State, HealthBenchTaskConfig]):  # type: ignore[misc]
    """One HealthBench task: a single reply, graded against the row's rubric."""

    @property
    def key(self) -> str:
        """The row's own id, with the repeat: stable across runs and unique in the taskset."""
        return f"{self.data.id}/{self.data.repeat}"

    @vf.stop  # type: ignore[untyped-decorator, misc, unused-ignore]
    async def single_turn(self, trace: vf.Trace) -> bool:
        """One reply, as HealthBench asks for."""
        return bool(trace.num_turns >= 1)

    @vf.reward(weight=1.0)  # type: ignore[untyped-decorator, misc, unused-ignore]
    async def healthbench(self, trace: vf.Trace) -> float:
        """The unclipped task score; raises `GradingError` (a failed rollout) when an item cannot be graded."""
        row = Row.model_validate(self.data.row)
        config: HealthBenchTaskConfig = self.config
        plan = config.plan(config.subset)
        async with GRADERS.lease(plan.grader) as grader:
            graded = await grade_sample(
                grader,
                row,
                _reply(trace),
                repeat=self.data.repeat,
                system_message=self.data.system_prompt,
                adjustment=plan.length_adjustment,
            )
        trace.info[INFO_KEY] = SampleRecord.of(graded).model_dump(mode="json", exclude_none=True)
        return graded.reward


class HealthBenchConfig(vf.TasksetConfig):  # type: ignore[misc]
    """Which tasks (`--env.taskset.*`): `subset` full (default), hard, consensus or professional, or `data`, a
    file in the official schema or Professional's (graded as the professional subset is); `split` one training
    split of them (train, validation or heldout; `heldout` a file of the rows that form it, with `data`;
    `split_seed` its seed; docs/training.md); `limit` of them sampled as the reference does; each `n_repeats`
    times."""

    id: str = TASKSET_ID
    subset: str | None = None
    data: str | None = None
    split: str | None = None
    heldout: str | None = None
    split_seed: int = 0
    limit: int | None = None
    n_repeats: int = 1
    task: HealthBenchTaskConfig = HealthBenchTaskConfig()


def _prompt(messages: list[Message]) -> list[Any]:
    return [_MESSAGE_TYPES[message.role](content=message.content) for message in messages]


class HealthBenchTaskset(vf.Taskset[HealthBenchTask, HealthBenchConfig]):  # type: ignore[misc]
    """HealthBench's tasks in the order `healthbench grade` takes them (file order, or the reference's sample)."""

    def load(self) -> list[HealthBenchTask]:
        """Every selected row, `n_repeats` times."""
        config: HealthBenchConfig = self.config
        sized(limit=config.limit, n_repeats=config.n_repeats)
        rows, kind = load_tasks(
            config.subset,
            config.data,
            config.limit,
            split=config.split,
            heldout=config.heldout,
            split_seed=config.split_seed,
        )
        # Graded with the settings of what the rows are: a file in Professional's schema as that subset is.
        task_config = config.task.model_copy(update={"subset": kind})
        return [
            HealthBenchTask(
                HealthBenchData(
                    id=row.prompt_id,
                    prompt=_prompt(row.prompt),
                    row=row.model_dump(mode="json"),
                    repeat=repeat,
                ),
                task_config,
            )
            for repeat in range(config.n_repeats)
            for row in rows
        ]


class HealthBenchEnvConfig(vf.EnvConfig):  # type: ignore[misc]
    """The single seat plays with the tool-less `null` harness on this machine: HealthBench needs one reply,
    not a sandboxed agent (`--env.agent.harness.*` and `--env.agent.runtime.*` still choose others)."""

    agent: vf.AgentConfig = vf.AgentConfig(harness=NullHarnessConfig(id="null"), runtime=vf.SubprocessConfig())


class HealthBenchEnv(vf.Env[HealthBenchEnvConfig]):  # type: ignore[misc]
    """One agent answers one task."""

    async def run(self, task: Any, agents: Any) -> None:
        """The episode: the agent's single reply to the task."""
        await agents.agent.run(task)


def load_environment(
    subset: str | None = None,
    data: str | Path | None = None,
    limit: int | None = None,
    n_repeats: int = 1,
    split: str | None = None,
    heldout: str | Path | None = None,
    split_seed: int = 0,
    **settings: Any,
) -> Any:
    """The HealthBench environment (the Inspect task's arguments): `settings` holds `GradingOptions` fields
    (`grader_model=...`, `length_adjustment_center=...`) and other `HealthBenchEnvConfig` fields (`agent=...`,
    `max_concurrent_agents=...`)."""
    grading = {name: settings.pop(name) for name in list(settings) if name in GradingOptions.model_fields}
    task = HealthBenchTaskConfig(subset=subset, **grading)
    taskset = HealthBenchConfig(
        subset=subset,
        data=None if data is None else str(data),
        split=split,
        heldout=None if heldout is None else str(heldout),
        split_seed=split_seed,
        limit=limit,
        n_repeats=n_repeats,
        task=task,
    )
    return HealthBenchEnv(HealthBenchEnvConfig(taskset=taskset, **settings))
