"""HealthBench as an OpenReward environment: one task per row, graded when the agent's final message arrives.

The agent sees the task's conversation (SPEC section 2) and no tools. Its final plain message goes to the
hidden `@terminal` tool, which grades it item by item (SPEC section 3) and returns the unclipped task score
as the reward; a reply that cannot be graded makes the tool raise, so no reward exists for it. Rows are
loaded once per process and bound to the served class before the server starts; a session only looks its
row up. The grader key arrives with each session's secrets; the endpoint, the model and one concurrency
budget belong to the server and are shared by all of its sessions. Each split may grade with settings of its
own (HealthBench Professional's split: gpt-5.4 at low effort, and a length-adjusted reward), all under that
one budget.
"""

from __future__ import annotations

import gc
import importlib.util
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

from fastapi import HTTPException
from pydantic import BaseModel, SecretStr

from healthbench.data.loading import collection_paused
from healthbench.data.schema import Row
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig


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

from openreward.environments import Environment, Server, Split, TextBlock, ToolOutput, terminal, tool  # noqa: E402
from openreward.environments import Message as SDKMessage  # noqa: E402
from openreward.log_utils import get_logger  # noqa: E402
from openreward.web_service import lookup_secret  # noqa: E402

from healthbench.integrations.openreward.deployment import Deployment, prompt_text, summary  # noqa: E402

GRADER_KEY_SECRET = "OPENAI_API_KEY"

logger = get_logger("healthbench.environment")


class FinalResponse(BaseModel):
    """The agent's final message."""

    response: str


# The SDK ships no type information, so its base class and decorators are `Any` to mypy.
class HealthBench(Environment):  # type: ignore[misc]
    """HealthBench tasks: a health conversation to answer, graded against its physician-written rubric."""

    deployment: ClassVar[Deployment | None] = None

    @classmethod
    def bound(cls, deployment: Deployment) -> type[HealthBench]:
        """A class of the same name (so served as `healthbench`) serving `deployment`.

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
        self.row = type(self)._served().row(task_spec)
        self.split: str = task_spec["split"]
        # Kept as it came: on the hosted platform it is a placeholder the egress proxy substitutes.
        key = lookup_secret(secrets, GRADER_KEY_SECRET)
        self._api_key = SecretStr(key) if key else None

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
        deployment = type(self)._served()
        key = self._api_key.get_secret_value() if self._api_key else None
        sample = await deployment.grade(self.split, self.row, params.response, key)
        return ToolOutput(
            blocks=[TextBlock(text=summary(sample))],
            metadata=deployment.metadata(self.split, sample),
            reward=sample.reward,
            finished=True,
        )


def build_server(
    splits: Mapping[str, Sequence[Row]],
    grader: GraderConfig | Mapping[str, GraderConfig],
    adjustments: Mapping[str, LengthAdjustment | None] | None = None,
) -> Any:
    """An OpenReward `Server` for these rows, with `healthbench` as its (only, so default) environment;
    `grader` and `adjustments` as `Deployment` takes them."""
    return Server([HealthBench.bound(Deployment(splits, grader, adjustments))])


def serve(
    splits: Mapping[str, Sequence[Row]],
    *,
    host: str = "0.0.0.0",
    port: int = 8080,
    grader: GraderConfig | Mapping[str, GraderConfig] | None = None,
    adjustments: Mapping[str, LengthAdjustment | None] | None = None,
) -> None:
    """Serve the environment over HTTP until interrupted (the SDK's uvicorn server, one worker).

    `grader` (the settings of every split, or of each split) defaults to the server's environment
    (`HEALTHBENCH_GRADER_MODEL`, `HEALTHBENCH_GRADER_BASE_URL`); sessions bring the key as their
    `OPENAI_API_KEY` secret.
    """
    with collection_paused():
        deployment = Deployment(splits, grader or GraderConfig.from_env(), adjustments)
        server = Server([HealthBench.bound(deployment)])
    # The rows live as long as the process: keep them out of every later collection's scan.
    gc.freeze()
    logger.info(
        "healthbench_serving",
        splits={name: len(rows) for name, rows in splits.items()},
        graders={name: config.describe() for name, config in deployment.graders.items()},
        length_adjustments={name: a.as_dict() for name, a in deployment.adjustments.items() if a is not None},
    )
    server.run(host=host, port=port)
