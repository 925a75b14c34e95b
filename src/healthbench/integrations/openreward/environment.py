"""HealthBench as OpenReward environments: one task per row, graded when the agent's reply arrives.

Two environments on one server, over the same rows and the same grading. `healthbench` follows the SDK's
`@terminal` design: the agent sees the task's conversation (SPEC section 2) and no tools, and its final plain
message goes to the hidden terminal tool `respond`. `healthbench_answer` is for harnesses that only call the
tools `list_tools` shows (inspect-openreward, firehorse, TRL, OpenReward's cookbook loops): its prompt adds
one sentence asking for the `answer` tool, which grades the reply exactly as `respond` does (`respond` stays
on it too). Either grades the reply item by item (SPEC section 3) and returns the unclipped task score as the
reward; a reply that cannot be graded makes the tool raise, so no reward exists for it. Both score a group of
candidate replies (`score_group`, for GRPO) the same way.

Rows are loaded once per process and bound to the served classes before the server starts; a session only
looks its row up. The grader key arrives with each session's secrets (`grading.settings` gives the order);
the endpoint, the model and one concurrency budget belong to the server and are shared by all of its
sessions and both environments. Each split may grade with settings of its own (HealthBench Professional's
split: gpt-5.4 at low effort, and a length-adjusted reward), all under that one budget.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

from fastapi import HTTPException
from pydantic import BaseModel, Field, SecretStr

from healthbench.data.loading import collection_paused
from healthbench.data.schema import Row
from healthbench.errors import HealthBenchError, NotServing, SessionRefused, SettingsError, UnknownTask
from healthbench.grading.sample import GradedSample
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig, session_grader_key
from healthbench.integrations.openreward.lazysdk import defer_package_init

defer_package_init("openreward")

from openreward.environments import (  # noqa: E402
    Environment,
    GroupScore,
    Server,
    Split,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)
from openreward.environments import Message as SDKMessage  # noqa: E402
from openreward.environments.types import RunToolError, RunToolOutput  # noqa: E402

from healthbench.integrations.openreward.access import Access, ServeLimits  # noqa: E402
from healthbench.integrations.openreward.batchroutes import BatchDoor, batch_app  # noqa: E402
from healthbench.integrations.openreward.deployment import (  # noqa: E402
    ANSWER_ENVIRONMENT,
    ANSWER_SUFFIX,
    ENVIRONMENT,
    ENVIRONMENTS,
    Deployment,
    answer_prompt_text,
    prompt_text,
    summary,
)
from healthbench.integrations.openreward.guard import CALLER, Guard  # noqa: E402
from healthbench.integrations.openreward.logs import guard_logs, logger  # noqa: E402
from healthbench.integrations.openreward.lost import LostSessions  # noqa: E402
from healthbench.integrations.openreward.routing import DeploymentRouter  # noqa: E402
from healthbench.integrations.openreward.usagelog import UsageLog  # noqa: E402
from healthbench.runs.spec import GraderSpec  # noqa: E402

# The tools a candidate of a group may have submitted its reply with.
SUBMIT_TOOLS = ("answer", "respond")


class FinalResponse(BaseModel):
    """The agent's final message."""

    response: str


class Answer(BaseModel):
    """The reply the `answer` tool sends."""

    response: str = Field(description="Your complete reply to the user's last message, exactly as they should read it.")


def candidate_reply(candidate: Any) -> str | None:
    """The reply a group candidate (a `GroupCandidate`) gives: the `response` of its last call to a submit tool
    (`answer`, `respond`), which is what its episode was graded on; else the text of its final assistant
    message (the SDK judges' "output" view), text blocks joined by newlines. None when it has neither.
    """
    turns = [message for message in candidate.messages if message.role == "assistant"]
    for message in reversed(turns):
        for block in reversed(message.blocks):
            if block.type == "tool_call" and block.name in SUBMIT_TOOLS:
                response = block.input.get("response")
                if isinstance(response, str):
                    return response
    texts = [block.text for block in turns[-1].blocks if block.type == "text"] if turns else []
    return "\n".join(texts) if texts else None


# The OpenReward split type of each training split; every other split is a test split.
_SPLIT_TYPES = {"train": "train", "validation": "validation"}


# The SDK ships no type information, so its base class and decorators are `Any` to mypy.
class HealthBench(Environment):  # type: ignore[misc]
    """HealthBench tasks: a health conversation to answer, graded against its physician-written rubric."""

    deployment: ClassVar[Deployment | None] = None

    @classmethod
    def bound(cls, deployment: Deployment) -> type[HealthBench]:
        """A class of the same name (so served under the same name: `healthbench`, `healthbench_answer`) serving
        `deployment`.

        A new class per deployment because the SDK caches splits and task listings on the class.
        """
        namespace = {"deployment": deployment, "__module__": cls.__module__, "__doc__": cls.__doc__}
        return cast(type[HealthBench], type(cls.__name__, (cls,), namespace))

    @classmethod
    def _served(cls) -> Deployment:
        if cls.deployment is None:
            raise NotServing("no rows bound: serve HealthBench.bound(Deployment(...)), not HealthBench itself")
        return cls.deployment

    @classmethod
    def list_splits(cls) -> list[Any]:
        """`train` and `validation` (the training splits of `data.splits`) by their type; every other split is a
        test split (`heldout`, and `test`, the whole data)."""
        return [Split(name=name, type=_SPLIT_TYPES.get(name, "test")) for name in cls._served().splits]

    @classmethod
    async def list_tasks(cls, split: str) -> list[dict[str, str]]:
        """`{"split", "prompt_id"}` per row, in file order."""
        return cls._served().specs(split)

    @classmethod
    async def get_task(cls, split: str, index: int) -> dict[str, str]:
        """The spec of task `index` of `split` (a session by split and index, or a task lookup).

        The SDK's default indexes a Python list, so -1 would grade the last task; an index outside
        0 to n-1 is refused instead, with a 400 naming the split's range (the SDK's own answer to an
        IndexError is only "Invalid index").
        """
        specs = cls._served().specs(split)
        if not 0 <= index < len(specs):
            raise HTTPException(
                status_code=400,
                detail=f"task index {index} is out of range: split {split!r} has {len(specs)} tasks, "
                f"indexed 0 to {len(specs) - 1}",
            )
        return specs[index]

    def __init__(self, task_spec: Mapping[str, Any], secrets: Mapping[str, Any]) -> None:
        super().__init__(task_spec, secrets)
        deployment = type(self)._served()
        try:
            self.row = deployment.row(task_spec)
        except UnknownTask as exc:  # a task spec made up by the client (the SDK's `task=`): say what there is
            raise HTTPException(status_code=400, detail=str(exc)) from None
        self.split: str = task_spec["split"]
        # Kept as it came: on the hosted platform it is a placeholder the egress proxy substitutes.
        key = session_grader_key(secrets)
        self._api_key = SecretStr(key) if key else None
        # Refused now, with the reason, rather than failing the episode's last call after the model has answered.
        missing = None if key else deployment.missing_key(self.split)
        if missing is not None:
            raise HTTPException(status_code=400, detail=missing)
        self.finished = False
        # The session id is the request's (the log adds it, shortened), and so is the credential.
        logger.info(
            "session_created",
            environment=self.served_name(),
            split=self.split,
            task=self.row.prompt_id,
            grader_key="the session's" if key else "the server's",
            **({"caller": caller} if (caller := CALLER.get()) is not None else {}),
        )

    async def get_prompt(self) -> list[Any]:
        """The task as one text block (SPEC section 2)."""
        return [TextBlock(text=prompt_text(self.row.prompt))]

    async def get_messages(self) -> list[Any]:
        """The task's conversation as role-tagged messages."""
        return [SDKMessage(role=m.role, blocks=[TextBlock(text=m.content)]) for m in self.row.prompt]

    @terminal  # type: ignore[untyped-decorator]
    @tool  # type: ignore[untyped-decorator]
    async def respond(self, params: FinalResponse) -> ToolOutput:
        """Grade the final reply against the task's rubric; the reward is the unclipped task score, or for a
        split with a length adjustment (Professional's) the unclipped length-adjusted score."""
        return await self._graded(params.response)

    async def _graded(self, response: str) -> ToolOutput:
        """The tool output for `response`: the reward, the verdicts, and the end of the episode."""
        deployment = type(self)._served()
        start = time.monotonic()
        sample = await deployment.grade(self.split, self.row, response, self._key())
        self.finished = True
        logger.info("reward", **self._said([sample], start), reward=round(sample.reward, 4))
        return ToolOutput(
            blocks=[TextBlock(text=summary(sample))],
            metadata=deployment.metadata(self.split, sample),
            reward=sample.reward,
            finished=True,
        )

    @classmethod
    def served_name(cls) -> str:
        """The name the server serves this environment under (the SDK's `name()`, lower-cased)."""
        return str(cls.name()).lower()

    def _key(self) -> str | None:
        return self._api_key.get_secret_value() if self._api_key else None

    def _said(self, samples: Sequence[GradedSample], start: float) -> dict[str, Any]:
        """The fields of a reward's log line: the task, the grader's time and its calls and tokens."""
        calls = sum(sample.usage.calls for sample in samples)
        prompt = sum(sample.usage.prompt_tokens for sample in samples)
        cached = sum(sample.usage.cached_prompt_tokens for sample in samples)
        completion = sum(sample.usage.completion_tokens for sample in samples)
        return {
            "environment": self.served_name(),
            "split": self.split,
            "task": self.row.prompt_id,
            "grader_s": round(time.monotonic() - start, 2),
            "grader_calls": calls,
            "prompt_tokens": prompt,
            "cached_prompt_tokens": cached,
            "completion_tokens": completion,
        }

    async def score_group(self, candidates: Sequence[Any]) -> list[Any]:
        """One `GroupScore` per candidate, in order: its reply (see `candidate_reply`) graded as the tools grade
        it, with the same reward and metadata, all candidates at once under the server's one budget. A
        candidate with no reply, or one that cannot be graded, fails the whole call naming its index; so does a
        group larger than the server scores (`--max-group-size`), and a group sent after the session's episode
        finished, both before any grader call."""
        deployment = type(self)._served()
        start = time.monotonic()
        try:
            if self.finished:
                raise SessionRefused(self.row.prompt_id)
            replies = [candidate_reply(candidate) for candidate in candidates]
            samples = await deployment.grade_group(self.split, self.row, replies, self._key())
        except HealthBenchError:
            # The SDK logs nothing for a failed group: one line here, as for a failed tool call.
            logger.exception("score_group_failed", environment=self.served_name(), candidates=len(candidates))
            raise
        rewards = [round(sample.reward, 4) for sample in samples]
        logger.info("group_scored", **self._said(samples, start), candidates=len(samples), rewards=rewards)
        return [GroupScore(reward=s.reward, metadata=deployment.metadata(self.split, s)) for s in samples]

    async def _call_tool(self, name: str, input: Any) -> Any:
        """The SDK's tool dispatch (it offers no public hook), with a call to a tool there is not answered by an
        error that names the tools there are."""
        output = await super()._call_tool(name, input)
        failure = output.root
        if isinstance(failure, RunToolError) and failure.reason == "not_found":
            listed = type(self).list_tools()
            tools = [f"'{spec.name}'" for spec in listed.tools]
            if listed.terminal_tool is not None:
                tools.append(f"'{listed.terminal_tool.name}' (the terminal tool)")
            error = f"{name!r} is not a tool of {type(self).name()}: its tools are {', '.join(tools)}"
            return RunToolOutput(RunToolError(reason="not_found", error=error))
        return output


class HealthBenchAnswer(HealthBench):
    """HealthBench tasks with a listed `answer` tool, for harnesses that only call the tools they are shown."""

    @classmethod
    def name(cls) -> str:
        """Served as `healthbench_answer`, whatever the bound class is called."""
        return ANSWER_ENVIRONMENT

    async def get_prompt(self) -> list[Any]:
        """The task as one text block, then the sentence asking for the `answer` tool."""
        return [TextBlock(text=answer_prompt_text(self.row.prompt))]

    async def get_messages(self) -> list[Any]:
        """The task's conversation, its last (user) turn followed by the sentence asking for the `answer` tool."""
        *earlier, last = await super().get_messages()
        [block] = last.blocks
        return [*earlier, SDKMessage(role=last.role, blocks=[TextBlock(text=block.text + ANSWER_SUFFIX)])]

    @tool  # type: ignore[untyped-decorator]
    async def answer(self, params: Answer) -> ToolOutput:
        """Send your reply to the user. Call it once, with the complete reply; the conversation ends there."""
        return await self._graded(params.response)


def build_server(
    splits: Mapping[str, Sequence[Row]],
    grader: GraderConfig | Mapping[str, GraderConfig],
    adjustments: Mapping[str, LengthAdjustment | None] | None = None,
    default: str = ENVIRONMENT,
    *,
    tracebacks: bool = False,
    access: Access | None = None,
    limits: ServeLimits | None = None,
) -> Any:
    """An OpenReward `Server` for these rows serving `healthbench` and `healthbench_answer` (the variant), with
    `default` the environment bare paths reach; `grader`, `adjustments` and `limits` as `Deployment` takes
    them; `access` the tokens it lets in (default: none needed). A reply that cannot be graded is logged as one
    line, with its traceback only if `tracebacks`."""
    return _server(Deployment(splits, grader, adjustments, limits=limits), default, tracebacks, access or Access())


def _server(deployment: Deployment, default: str, tracebacks: bool, access: Access) -> Any:
    if default not in ENVIRONMENTS:
        raise SettingsError(f"no environment {default!r} to make the default: choose from {', '.join(ENVIRONMENTS)}")
    keys = [config.api_key.get_secret_value() for config in deployment.graders.values() if config.api_key]
    guard_logs(tracebacks=tracebacks, secrets=(*(access.tokens.secrets if access.tokens else ()), *keys))
    classes = {ENVIRONMENT: HealthBench.bound(deployment), ANSWER_ENVIRONMENT: HealthBenchAnswer.bound(deployment)}
    # The SDK serves its first environment at the bare paths.
    server = Server([classes[default], *(cls for name, cls in classes.items() if name != default)])
    # The routes' first segments, read from the app so a later SDK's new routes are covered: those of the
    # per-environment routes (`/{env_name}/tools`), which a bare path starts with, and the server's own.
    paths = [getattr(route, "path", "") for route in server.app.routes]
    scoped = {path.split("/")[2] for path in paths if path.startswith("/{")}
    roots = {path.strip("/").split("/")[0].lower() for path in paths if not path.startswith("/{")}
    # `healthbench` is also the deployment's own name, which clients send for the server as a whole: only the
    # variant is chosen by the header, so a server whose default is the variant keeps it for them.
    server.app.add_middleware(
        DeploymentRouter,
        served=[default, *(name for name in ENVIRONMENTS if name != default)],
        variants={ANSWER_ENVIRONMENT},
        scoped=scoped,
        roots=roots,
        splits=list(deployment.splits),
        log=logger.warning,
    )
    server.app.add_middleware(LostSessions)  # a session this process does not have: named, as lost
    server.app.add_middleware(BatchDoor, routes=batch_app(deployment, logger), log=logger)
    # Added last, so outermost: a request it refuses reaches nothing behind it, and no body it has not bounded
    # is read by the router.
    server.app.add_middleware(Guard, tokens=access.tokens, max_body=deployment.limits.request_bytes, log=logger.warning)
    return server


def serve(
    splits: Mapping[str, Sequence[Row]],
    *,
    access: Access | None = None,
    port: int = 8080,
    grader: GraderConfig | Mapping[str, GraderConfig] | None = None,
    adjustments: Mapping[str, LengthAdjustment | None] | None = None,
    default: str = ENVIRONMENT,
    tracebacks: bool = False,
    limits: ServeLimits | None = None,
    slow_start: bool = False,
) -> None:
    """Serve both environments over HTTP until interrupted (the SDK's uvicorn server, one worker), on
    `access.host` (default loopback) letting in its tokens, `default` at the bare paths; a reply that cannot be
    graded is logged as one line, with its traceback if `tracebacks`.

    `grader` (the settings of every split, or of each split) defaults to the server's environment (see
    `GraderConfig.from_env` with `served`); sessions bring the key as a secret. Graders stay warm between
    sessions (`integrations.pool`) and close with the server; a key whose limits are not known yet is sent the
    grader budget's worth at once unless `slow_start` (see `ApiClient`). Raises `SettingsError` for an `access`
    that would let anyone spend the server's key (see `Access.refusal`).
    """
    access = access or Access()
    with collection_paused():
        # A line a minute while replies are graded: calls, tokens, the prompt cache's hit rate and what it saved.
        usage_log = UsageLog(lambda **fields: logger.info("healthbench_grader_usage", **fields))
        deployment = Deployment(
            splits,
            grader or GraderConfig.from_env(served=True),
            adjustments,
            usage_log,
            limits=limits,
            slow_start=slow_start,
        )
        if (refusal := access.refusal(deployment.graders.values())) is not None:
            raise SettingsError(refusal)
        server = _server(deployment, default, tracebacks, access)
    # The rows live as long as the process: keep them out of every later collection's scan.
    gc.freeze()
    logger.info(
        "healthbench_serving",
        environments=list(ENVIRONMENTS),
        default_environment=default,
        splits={name: len(rows) for name, rows in splits.items()},
        graders={name: GraderSpec.of(config).model_dump() for name, config in deployment.graders.items()},
        grader_budget=deployment.budget_description(),
        length_adjustments={name: a.as_dict() for name, a in deployment.adjustments.items() if a is not None},
        limits=deployment.limits.model_dump(),
        tokens=0 if access.tokens is None else len(access.tokens.digests),
    )
    for warning in access.warnings():
        logger.warning("healthbench_open", detail=warning)
    server.run(host=access.host, port=port)
