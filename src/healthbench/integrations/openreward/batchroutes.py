"""`serve`'s batch reward routes: a trainer's whole step of replies graded at once, outside any session.

- `POST /rewards`: `{"split": NAME, "items": [{"prompt_id": ID, "reply": TEXT}, ...]}`, answered with
  `{"results": [{"prompt_id", "reward", "error", "axes"}, ...]}` in the items' order. A reply that cannot be
  graded (a grader failure after the retries, or a reply longer than the server grades) has `reward: null` and
  the error; the others are graded all the same.
- `POST /openrlhf`: OpenRLHF's remote reward protocol (`--reward.remote_url`): `{"query": [...], "prompts": [...],
  "labels": [...]}`, answered with `{"rewards": [...], "scores": [...], "extra_logs": {...}}`. A query is the
  prompt's text and the reply's, decoded with the tokenizer's special tokens; the reply is what follows the
  prompt, less the end-of-turn and padding tokens it ends with. A label is the task's prompt_id (`healthbench
  export --format openrlhf` writes it). A sample that cannot be graded fails the whole request naming it (HTTP
  502, or 400 for a reply too long): OpenRLHF then leaves that rollout's reward unset, never a made-up 0.

Which split a prompt_id is looked up in: the request's (`split` in `/rewards`' body, `?split=NAME` on
`/openrlhf`), else `train` when the server serves it, else `test`. An unknown split or prompt_id, what is not a
reply (`NotAReply`, as TRL's and verl's rewards refuse it) and a body that is not the route's are HTTP 400 naming
them; a batch of more replies than `--max-batch-size` is refused (413); all before any grader call. Every refusal is
one log line naming what and why (`rewards_failed`, `openrlhf_failed`).

What a step pays for (`reuse`): a request whose client goes away before its answer is cancelled with its grading
(`BatchDoor`, `gone`), and a sample sent again (OpenRLHF's resend after its timeout) or twice reuses the verdicts
already paid for the same task and reply.

Every step is graded by the split's `BatchRewards` (`Deployment.rewards`), as a trainer's in-process rewards grade
theirs and a session's reply is graded: the split's settings and length adjustment, the server's grader key, the
server's one budget and its warm graders, so the many one-sample requests of an OpenRLHF step share them as the
items of one `/rewards` batch do. Both bodies are typed records (`runs.outputs`): `/rewards`' request and answer
are those TRL's server mode sends and reads.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, JsonValue
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from healthbench.data.tags import AXIS_PREFIX
from healthbench.errors import HealthBenchError, NotAReply, OverLimit, UnknownTask
from healthbench.integrations.openreward.deployment import Deployment
from healthbench.integrations.openreward.gone import wanted
from healthbench.integrations.rewards import Reward, reply_text
from healthbench.runs.outputs import OpenRLHFAnswer, RewardsAnswer, RewardsRequest

# What a decoded rollout may end with after the reply: end-of-turn and end-of-text tokens of the common chat
# templates (Qwen and ChatML, Llama 3, Phi, Gemma, Mistral and Llama 2, DeepSeek, gpt-oss), and padding.
END_TOKENS = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<|return|>",
    "<end_of_turn>",
    "<eos>",
    "</s>",
    "<pad>",
    "<|end▁of▁sentence|>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek's, with full-width bars
)
REWARDS_PATH, OPENRLHF_PATH = "/rewards", "/openrlhf"
BATCH_PATHS = frozenset({REWARDS_PATH, OPENRLHF_PATH})
TRAIN, TEST = "train", "test"
Answer = TypeVar("Answer", RewardsAnswer, OpenRLHFAnswer)


class OpenRLHFRequest(BaseModel):
    """OpenRLHF's remote reward request: decoded prompt-and-reply, prompt text and label, one each per sample. A query
    may be anything JSON holds, so that what is not a reply is refused as every reward path refuses it
    (`NotAReply`)."""

    query: list[JsonValue]
    prompts: list[str]
    labels: list[str]


class Refused(HTTPException):
    """A request the batch routes refuse (HTTP `status`, `detail` saying what and why), with the fields its log line
    adds (`split`, `sample`)."""

    def __init__(self, status: int, detail: str, **fields: Any) -> None:
        super().__init__(status_code=status, detail=detail)
        self.fields = fields


def strip_end_tokens(reply: str) -> str:
    """`reply` less the end-of-turn and padding tokens it ends with (`END_TOKENS`), and the whitespace between
    them; whitespace that ends the reply itself stays, as `grade` would see it."""
    while True:
        trimmed = reply.rstrip()
        token = next((token for token in END_TOKENS if trimmed.endswith(token)), None)
        if token is None:
            return reply
        reply = trimmed[: -len(token)]


def openrlhf_reply(index: int, query: str, prompt: str, label: str) -> str:
    """The reply of sample `index`: its query after its prompt, less end tokens; HTTP 400 naming the sample when
    the query does not start with its prompt."""
    if not query.startswith(prompt):
        raise Refused(
            400,
            f"sample {index} (task {label}): its query does not start with its prompt, so its reply cannot be told "
            "apart (OpenRLHF sends the prompt's tokens and the reply's, decoded: a prompt cut to fit --data.max_len, "
            "or one the tokenizer does not decode back to itself, breaks that)",
            sample=index,
        )
    return strip_end_tokens(query[len(prompt) :])


class BatchRoutes:
    """The batch routes of one server's `deployment` (see the module docstring), each step graded by the split's
    `BatchRewards`; `log` (the server's logger) is told of each request graded (`info`), in one line."""

    def __init__(self, deployment: Deployment, log: Any) -> None:
        self.deployment = deployment
        self.log = log
        self._axes: dict[str, list[str]] = {}

    def split(self, named: str | None) -> str:
        """The split a request grades on: the one named, else `train` if served, else `test`; HTTP 400 naming the
        splits for one the server does not serve."""
        splits = self.deployment.splits
        split = named if named is not None else (TRAIN if TRAIN in splits else TEST)
        if split not in splits:
            listed = ", ".join(repr(name) for name in splits)
            raise Refused(400, f"no split {split[:100]!r} here: the splits are {listed}", split=split[:100])
        if self.deployment.missing_key(split) is not None:
            # The batch routes have no session to bring a key: only the server's own grades them.
            config = self.deployment.graders[split]
            raise Refused(
                503,
                f"this server has no grader key, and the grader {config.model} at {config.base_url} needs one for the "
                "batch routes: start the server with HEALTHBENCH_GRADER_API_KEY set",
                split=split,
            )
        return split

    def bounded(self, split: str, count: int) -> None:
        """HTTP 413, before any grader call, for a batch of more replies than the server grades at once."""
        most = self.deployment.limits.batch_size
        if count > most:
            raise Refused(
                413,
                f"a batch of {count:,} replies is more than this server grades at once: at most {most:,} "
                "(healthbench serve --max-batch-size)",
                split=split,
            )

    async def graded(self, split: str, items: Sequence[tuple[object, object]]) -> list[Reward]:
        """The rewards of `items` on `split`: HTTP 400 naming a prompt_id the split does not have or what is not a
        reply (before any grader call), 502 for a grader no reply could be graded with (its message names why)."""
        self.bounded(split, len(items))
        try:
            return await self.deployment.rewards(split).grade(items)
        except (UnknownTask, NotAReply) as exc:
            raise Refused(400, str(exc), split=split) from None
        except HealthBenchError as exc:  # the grader itself unusable (its key refused, say): no item can be graded
            raise Refused(502, f"the grader cannot grade: {exc}", split=split) from None

    async def rewards(self, request: RewardsRequest) -> RewardsAnswer:
        """`/rewards`: every item graded at once; an item that cannot be graded has a null reward and its error."""
        split = self.split(request.split)
        start = time.monotonic()
        results = await self.graded(split, [(item.prompt_id, item.reply) for item in request.items])
        failures = sum(result.reward is None for result in results)
        said = _spent(start, results)
        self.log.info("rewards_graded", route=REWARDS_PATH, split=split, items=len(results), failed=failures, **said)
        return RewardsAnswer(results=[result.result() for result in results])

    async def openrlhf(self, request: OpenRLHFRequest, named: str | None) -> OpenRLHFAnswer:
        """`/openrlhf`: every sample graded at once; one that cannot be graded fails the request naming it."""
        split = self.split(named)
        counts = {len(request.query), len(request.prompts), len(request.labels)}
        if len(counts) != 1:
            raise Refused(
                400,
                f"query, prompts and labels differ in length ({len(request.query)}, {len(request.prompts)}, "
                f"{len(request.labels)}): one of each per sample",
                split=split,
            )
        self.bounded(split, len(request.labels))
        replies: list[tuple[object, object]] = []
        for index, (query, prompt, label) in enumerate(
            zip(request.query, request.prompts, request.labels, strict=True)
        ):
            try:
                text = reply_text(query, index, label)
            except NotAReply as exc:
                raise Refused(400, str(exc), split=split, sample=index) from None
            replies.append((label, openrlhf_reply(index, text, prompt, label)))
        start = time.monotonic()
        rewards = await self.graded(split, replies)
        for index, reward in enumerate(rewards):
            if reward.reward is None:
                status = 400 if isinstance(reward.failure, OverLimit) else 502
                raise Refused(status, f"sample {index}: {reward.error}", split=split, sample=index)
        scores = [reward.reward for reward in rewards if reward.reward is not None]
        said = _spent(start, rewards)
        self.log.info("rewards_graded", route=OPENRLHF_PATH, split=split, items=len(scores), failed=0, **said)
        return OpenRLHFAnswer(rewards=scores, scores=scores, extra_logs=self._extra_logs(split, rewards))

    def _extra_logs(self, split: str, rewards: Sequence[Reward]) -> dict[str, list[float]]:
        """Per-axis scores, one value per sample, under the same keys for every request of the split (OpenRLHF
        merges a step's logs by key): `axis:NAME` is the axis's score, 0 for a task with no item of the axis, and
        `axis:NAME:graded` 1 or 0 says which; an axis's mean over a step is the first's mean over the second's."""
        if split not in self._axes:
            tags = {tag for row in self.deployment.splits[split] for item in row.rubrics for tag in item.tags}
            self._axes[split] = sorted(tag for tag in tags if tag.startswith(AXIS_PREFIX))
        logs: dict[str, list[float]] = {}
        for tag in self._axes[split]:
            logs[tag] = [reward.axes.get(tag, 0.0) for reward in rewards]
            logs[f"{tag}:graded"] = [float(tag in reward.axes) for reward in rewards]
        return logs


def _spent(start: float, rewards: Sequence[Reward]) -> dict[str, float | int]:
    """A graded request's log fields: the grader's seconds, the calls it paid for and those whose verdicts it
    reused."""
    return {
        "grader_s": round(time.monotonic() - start, 2),
        "grader_calls": sum(reward.paid_calls for reward in rewards),
        "reused_calls": sum(reward.reused_calls for reward in rewards),
    }


def batch_app(deployment: Deployment, log: Any) -> FastAPI:
    """An app of its own answering `POST /rewards` and `POST /openrlhf` for `deployment`; `log` as `BatchRoutes`
    takes it, also told of every request refused (`warning`: `rewards_failed`, `openrlhf_failed`, naming what and
    why) and of a failure that is no fault of the request's (`error`)."""
    routes = BatchRoutes(deployment, log)
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    async def rewards(body: RewardsRequest) -> RewardsAnswer:
        """A step's replies graded at once: one result per item, a null reward with its error for a reply that
        cannot be graded."""
        return await _answered(REWARDS_PATH, routes.rewards(body), log)

    async def openrlhf(body: OpenRLHFRequest, split: str | None = None) -> OpenRLHFAnswer:
        """OpenRLHF's remote reward protocol (`--reward.remote_url http://user:TOKEN@host:port/openrlhf`)."""
        return await _answered(OPENRLHF_PATH, routes.openrlhf(body, split), log)

    async def unreadable(request: Request, exc: Exception) -> JSONResponse:
        """A body that is not the route's (a field missing or of another type): HTTP 400 in one line naming the
        fields, said in the log as every refusal is, where FastAPI would answer 422 with a list."""
        errors = exc.errors() if isinstance(exc, RequestValidationError) else []
        said = "; ".join(f"{'.'.join(map(str, error['loc'][1:])) or 'body'}: {error['msg']}" for error in errors)
        detail = f"the request body is not {request.url.path}'s: {said}"
        log.warning(_failed(request.url.path), status=400, detail=detail)
        return JSONResponse({"detail": detail}, status_code=400)

    app.add_api_route(REWARDS_PATH, rewards, methods=["POST"])
    app.add_api_route(OPENRLHF_PATH, openrlhf, methods=["POST"])
    app.add_exception_handler(RequestValidationError, unreadable)
    return app


def _failed(path: str) -> str:
    """The log event of a request to `path` refused: `rewards_failed`, `openrlhf_failed`."""
    return f"{path.strip('/').lower()}_failed"


async def _answered(path: str, answer: Awaitable[Answer], log: Any) -> Answer:
    """`answer`; a refusal said in one log line naming what and why (`rewards_failed`, `openrlhf_failed`), and for
    a failure that is not the request's (a bug) one log line and HTTP 500 naming it, rather than a traceback on the
    server's console."""
    try:
        return await answer
    except Refused as exc:
        log.warning(_failed(path), status=exc.status_code, detail=exc.detail, **exc.fields)
        raise
    except Exception as exc:
        log.error("batch_route_failed", error=f"{type(exc).__name__}: {exc}")
        raise HTTPException(status_code=500, detail=f"the server failed: {type(exc).__name__}: {exc}") from exc


class BatchDoor:
    """ASGI middleware sending the batch routes' paths to `routes` (see `batch_app`), everything else on to `app`.

    The SDK's server sends a path whose first segment is none of its own routes to its default environment, and
    learns its routes when it is built: the batch routes are served beside it, not inside it. Placed inside the
    `Guard` (so the token and the body bound apply) and outside the `DeploymentRouter` (which would refuse the
    paths as environments it does not serve). A batch request whose client goes away before its answer is
    cancelled, its grading with it (`wanted`): OpenRLHF gives up after 180 s, and what nobody waits for is not paid.
    """

    def __init__(self, app: ASGIApp, *, routes: ASGIApp, log: Any) -> None:
        self.app = app
        self.routes = routes
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/").lower() in BATCH_PATHS:
            if await wanted(self.routes, scope, receive, send):
                return
            path = scope["path"].rstrip("/").lower()
            self.log.warning(
                f"{path.strip('/')}_abandoned",
                detail="the client went away before its answer: its grading is cancelled, and what was answered by "
                "then is kept for the same replies sent again",
            )
        else:
            await self.app(scope, receive, send)
