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
import importlib.util
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

from fastapi import HTTPException
from pydantic import BaseModel, Field, SecretStr

from healthbench.data.loading import collection_paused
from healthbench.data.schema import Row
from healthbench.errors import HealthBenchError
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig, session_grader_key


def _defer_package_init(name: str) -> None:
    """Register package `name` so that its submodules import without running its `__init__` first.

    `openreward/__init__.py` imports the client side of the SDK (the anthropic, openai and google SDKs):
    seconds of start-up and about 80 MB that a server never uses. The package's `__init__` still runs,
    in place, the first time anything reads a top-level name (`from openreward import AsyncOpenReward`),
    so code elsewhere in the process sees the ordinary package.
    """
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not an importable package: let the imports below fail as usual
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    lock = threading.Lock()

    def complete(attribute: str) -> Any:
        with lock:
            if "__getattr__" in module.__dict__:
                del module.__dict__["__getattr__"]
                loader.exec_module(module)
        return getattr(module, attribute)

    module.__dict__["__getattr__"] = complete
    sys.modules[name] = module


_defer_package_init("openreward")

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
from healthbench.integrations.openreward.logs import logger, one_line_failures  # noqa: E402
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
            raise RuntimeError("no rows bound: serve HealthBench.bound(Deployment(...)), not HealthBench itself")
        return cls.deployment

    @classmethod
    def list_splits(cls) -> list[Any]:
        """Every split is a test split: HealthBench has no training data."""
        return [Split(name=name, type="test") for name in cls._served().splits]

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
        except ValueError as exc:  # a task spec made up by the client (the SDK's `task=`): say what there is
            raise HTTPException(status_code=400, detail=str(exc)) from None
        self.split: str = task_spec["split"]
        # Kept as it came: on the hosted platform it is a placeholder the egress proxy substitutes.
        key = session_grader_key(secrets)
        self._api_key = SecretStr(key) if key else None
        # Refused now, with the reason, rather than failing the episode's last call after the model has answered.
        missing = None if key else deployment.missing_key(self.split)
        if missing is not None:
            raise HTTPException(status_code=400, detail=missing)

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
        sample = await deployment.grade(self.split, self.row, response, self._key())
        return ToolOutput(
            blocks=[TextBlock(text=summary(sample))],
            metadata=deployment.metadata(self.split, sample),
            reward=sample.reward,
            finished=True,
        )

    def _key(self) -> str | None:
        return self._api_key.get_secret_value() if self._api_key else None

    async def score_group(self, candidates: Sequence[Any]) -> list[Any]:
        """One `GroupScore` per candidate, in order: its reply (see `candidate_reply`) graded as the tools grade
        it, with the same reward and metadata, all candidates at once under the server's one budget. A
        candidate with no reply, or one that cannot be graded, fails the whole call naming its index."""
        deployment = type(self)._served()
        replies = [candidate_reply(candidate) for candidate in candidates]
        try:
            samples = await deployment.grade_group(self.split, self.row, replies, self._key())
        except HealthBenchError:
            # The SDK logs nothing for a failed group: one line here, as for a failed tool call.
            logger.exception("score_group_failed", environment=type(self).name(), candidates=len(replies))
            raise
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
) -> Any:
    """An OpenReward `Server` for these rows serving `healthbench` and `healthbench_answer` (the variant), with
    `default` the environment bare paths reach; `grader` and `adjustments` as `Deployment` takes them. A reply
    that cannot be graded is logged as one line, with its traceback only if `tracebacks`."""
    return _server(Deployment(splits, grader, adjustments), default, tracebacks)


def _server(deployment: Deployment, default: str, tracebacks: bool) -> Any:
    if default not in ENVIRONMENTS:
        raise ValueError(f"no environment {default!r} to make the default: choose from {', '.join(ENVIRONMENTS)}")
    one_line_failures(tracebacks)
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
    return server


def serve(
    splits: Mapping[str, Sequence[Row]],
    *,
    host: str = "0.0.0.0",
    port: int = 8080,
    grader: GraderConfig | Mapping[str, GraderConfig] | None = None,
    adjustments: Mapping[str, LengthAdjustment | None] | None = None,
    default: str = ENVIRONMENT,
    tracebacks: bool = False,
) -> None:
    """Serve both environments over HTTP until interrupted (the SDK's uvicorn server, one worker), `default`
    at the bare paths; a reply that cannot be graded is logged as one line, with its traceback if `tracebacks`.

    `grader` (the settings of every split, or of each split) defaults to the server's environment (see
    `GraderConfig.from_env` with `served`); sessions bring the key as a secret. Graders stay warm between
    sessions (`grading.pool`) and close with the server.
    """
    with collection_paused():
        # A line a minute while replies are graded: calls, tokens, the prompt cache's hit rate and what it saved.
        usage_log = UsageLog(lambda **fields: logger.info("healthbench_grader_usage", **fields))
        deployment = Deployment(splits, grader or GraderConfig.from_env(served=True), adjustments, usage_log)
        server = _server(deployment, default, tracebacks)
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
    )
    server.run(host=host, port=port)
