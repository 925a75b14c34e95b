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
from pathlib import Path
from typing import Any, ClassVar, cast

from fastapi import HTTPException
from pydantic import BaseModel, SecretStr

from .config import GraderConfig, GraderPool
from .data import Message, Row, collection_paused, load_rows
from .grading import (
    TEMPLATE_SHA256,
    GradedReply,
    GradingError,
    render_conversation,
    transcript_with_reply,
)
from .scoring import LengthAdjustment, task_metrics
from .subsets import load_subset


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

GRADER_KEY_SECRET = "OPENAI_API_KEY"
MULTI_TURN_INSTRUCTION = "Write the assistant's reply to the final user turn of this conversation."
EXPLANATION_CHARS = 200

logger = get_logger("healthbench.environment")


def prompt_text(messages: Sequence[Message]) -> str:
    """The task as one block of text: a lone message verbatim, else an instruction and the rendered turns."""
    if len(messages) == 1:
        return messages[0].content
    return MULTI_TURN_INSTRUCTION + "\n\n" + render_conversation(messages)


def load_splits(data: Path | None = None, subsets: Sequence[str] = ()) -> dict[str, list[Row]]:
    """The rows to serve by split: a JSONL file or the `full` subset is `test`; `hard`, `consensus` and
    `professional` keep their names.

    With neither a file nor a subset, the full set is served.
    """
    if data is None and not subsets:
        subsets = ("full",)
    splits: dict[str, list[Row]] = {}
    if data is not None:
        splits["test"] = load_rows(data)
    for name in subsets:
        split = "test" if name == "full" else name
        if split in splits:
            raise ValueError(f"split {split!r} given twice (a data file and the full subset are both 'test')")
        splits[split] = load_subset(name)
    return splits


class Deployment:
    """What one server serves: rows by split, their task specs, and the grading all sessions share.

    `grader` is the settings of every split, or of each split by name; `adjustments` the length adjustment of
    a split whose reward is length-adjusted (none for a split not named).
    """

    def __init__(
        self,
        splits: Mapping[str, Sequence[Row]],
        grader: GraderConfig | Mapping[str, GraderConfig],
        adjustments: Mapping[str, LengthAdjustment | None] | None = None,
    ) -> None:
        if not splits:
            raise ValueError("nothing to serve: no splits")
        self.splits = {name: tuple(rows) for name, rows in splits.items()}
        self.graders = {name: grader if isinstance(grader, GraderConfig) else grader[name] for name in self.splits}
        self.adjustments = {name: (adjustments or {}).get(name) for name in self.splits}
        self._rows: dict[tuple[str, str], Row] = {}
        self._specs: dict[str, list[dict[str, str]]] = {}
        for name, rows in self.splits.items():
            if not rows:
                raise ValueError(f"split {name!r} has no rows")
            for row in rows:
                if (name, row.prompt_id) in self._rows:
                    raise ValueError(f"split {name!r}: duplicate prompt_id {row.prompt_id!r}")
                self._rows[name, row.prompt_id] = row
            # Built once: the SDK asks for the listing again on every request.
            self._specs[name] = [{"split": name, "prompt_id": row.prompt_id} for row in rows]
        self._graders = GraderPool(max(config.concurrency for config in self.graders.values()))

    def specs(self, split: str) -> list[dict[str, str]]:
        """The task specs of a split, in file order: small, the row stays on the server."""
        return self._specs[split]

    def row(self, task_spec: Mapping[str, Any]) -> Row:
        """The row a task spec names; `ValueError` for a spec that names none."""
        split, prompt_id = task_spec.get("split"), task_spec.get("prompt_id")
        row = self._rows.get((split, prompt_id)) if isinstance(split, str) and isinstance(prompt_id, str) else None
        if row is None:
            raise ValueError(f"no task with split {split!r} and prompt_id {prompt_id!r}")
        return row

    async def grade(self, split: str, row: Row, response: str, api_key: str | None) -> GradedReply:
        """Grade `response` as the reply to `row` with its split's settings and the session's key (else the
        server's own).

        Raises `GradingError` when an item cannot be graded; the key never appears in its message.
        """
        config = self.graders[split]
        if not api_key and config.api_key is not None:
            api_key = config.api_key.get_secret_value()
        keyed = config.model_copy(update={"api_key": SecretStr(api_key) if api_key else None})
        async with self._graders.lease(keyed) as grader:
            try:
                return await grader.grade(row.prompt_id, transcript_with_reply(row.prompt, response), row.rubrics)
            except GradingError as exc:
                # An endpoint may echo the key in an error body, and the cause ends up in the server's log.
                if api_key and api_key in exc.cause:
                    cause = exc.cause.replace(api_key, "[redacted]")
                    raise GradingError(exc.prompt_id, exc.criterion, cause) from None
                raise


class FinalResponse(BaseModel):
    """The agent's final message."""

    response: str


def _metadata(
    row: Row,
    graded: GradedReply,
    metrics: dict[str, float],
    config: GraderConfig,
    adjustment: LengthAdjustment | None,
    reward: float,
) -> dict[str, Any]:
    items = [
        {
            "criteria_met": item.criteria_met,
            "points": item.points,
            "tags": item.tags,
            "explanation": item.explanation[:EXPLANATION_CHARS],
        }
        for item in graded.items
    ]
    return {
        "prompt_id": row.prompt_id,
        "items": items,
        "metrics": metrics,
        "score": metrics["overall_score"],
        "length_adjusted_score": None if adjustment is None else reward,
        "length_adjustment": None if adjustment is None else adjustment.as_dict(),
        "grader_model": config.model,
        "grader_request": config.request_settings(),
        "template_sha256": TEMPLATE_SHA256,
        "usage": graded.usage.as_dict(),
    }


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
        split = self.split
        key = self._api_key.get_secret_value() if self._api_key else None
        graded = await deployment.grade(split, self.row, params.response, key)
        metrics = task_metrics(
            self.row.example_tags,
            [item.points for item in graded.items],
            [item.tags for item in graded.items],
            [item.criteria_met for item in graded.items],
        )
        adjustment = deployment.adjustments[split]
        score = metrics["overall_score"]
        reward = score if adjustment is None else adjustment.adjust(score, params.response)
        summary = f"score {score:.4f}" + ("" if adjustment is None else f", length-adjusted {reward:.4f}")
        config = deployment.graders[split]
        return ToolOutput(
            blocks=[TextBlock(text=f"Graded against {len(graded.items)} rubric items: {summary}.")],
            metadata=_metadata(self.row, graded, metrics, config, adjustment, reward),
            reward=reward,
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
