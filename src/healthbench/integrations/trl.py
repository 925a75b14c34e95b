"""HealthBench as a reward function for TRL's `GRPOTrainer` in dataset mode (`reward_funcs=[reward_function()]`).

The dataset is `healthbench export --format trl`'s: a conversational `prompt` and the task's `prompt_id`, which
TRL passes to reward functions as a keyword column. The function is `async def`, so TRL runs it on its event loop
(a daemon thread that lives as long as the trainer), and it grades every completion of the step at once with warm
graders made on that loop (`integrations.rewards`): about one grader round a step while the step's rubric items
fit the grader budget. It returns one float per completion, exactly `healthbench grade`'s score for that reply, or
`None` for a completion one of whose rubric items could not be graded (TRL leaves it out rather than training on a
0; a warning names its task and item), and logs the step's per-axis means through TRL's `log_metric`
(`healthbench/accuracy`, ...).

In-process (the default), the grader key is in the trainer's environment. Given `server_url` and `token`, the step
is posted instead to a running `healthbench serve`'s `POST /rewards`, which grades it under the server's own key and
budget: the key stays on the server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from pydantic import ValidationError

from healthbench.api.endpoint import is_http_url
from healthbench.data.tags import AXIS_PREFIX
from healthbench.errors import DataError, EndpointUnusable, HealthBenchError, RequestFailed, SettingsError
from healthbench.integrations.rewards import BatchRewards, Reward, axis_means, reply_text
from healthbench.runs.outputs import ReplyItem, RewardResult, RewardsAnswer, RewardsRequest

__all__ = ["reply_text", "reward_function"]

logger = logging.getLogger(__name__)

NAME = "healthbench"  # TRL names the reward's metrics after the function: rewards/healthbench/mean
SERVER_TIMEOUT = 900.0  # seconds a step's request to `serve` may take: a step of 1,024 items at a slow grader


class Grades(Protocol):
    """Where a step's rewards come from: this process's graders, or a server's."""

    async def grade(self, items: Sequence[tuple[object, object]]) -> list[Reward]: ...


RewardFunc = Callable[..., Coroutine[Any, Any, list[float | None]]]


def reward_function(
    data: str | Path | None = None,
    *,
    split: str | None = None,
    heldout: str | Path | None = None,
    seed: int = 0,
    concurrency: int | None = None,
    server_url: str | None = None,
    token: str | None = None,
    timeout: float = SERVER_TIMEOUT,
    **grading: Any,
) -> RewardFunc:
    """HealthBench's reward function for `GRPOTrainer(reward_funcs=[...])`, named `healthbench`.

    In-process: the rows are `data` (a path or a subset name), else `HEALTHBENCH_DATA`, else the full set, of
    `split` only (`train`, `validation`, `heldout`; `heldout` and `seed` as `export` was given them) when one is
    named; the grader is `serve`'s, its settings from `grading` (`GradingOptions` fields: `grader_model=...`,
    `grader_base_url=...`, `grader_api_key=...`) else the environment variables `serve` reads, its budget
    `concurrency` (else `HEALTHBENCH_GRADER_CONCURRENCY`, else serve's 256 growing to 1,024). Rows are loaded here,
    so bad data or settings fail before training starts.

    With `server_url` (and `token`, the server's), the step goes to that `healthbench serve`'s `POST /rewards` for
    `split` (required then), waiting at most `timeout` seconds; the other arguments are the server's business.
    """
    source: Grades
    if server_url is not None:
        if split is None:
            raise SettingsError("`server_url` needs `split`: the served split the prompt_ids are in (`train`)")
        if data is not None or grading or concurrency is not None:
            raise SettingsError(
                "with `server_url` the server grades: `data`, `concurrency` and grader settings are its own"
            )
        source = ServedRewards(server_url, token, split, timeout)
    else:
        source = BatchRewards(data, split=split, heldout=heldout, seed=seed, concurrency=concurrency, **grading)
    in_process = isinstance(source, BatchRewards)

    async def healthbench(
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Any] | None = None,
        prompt_id: Sequence[str] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """One reward per completion: its task score, or None where it could not be graded."""
        if prompt_id is None:
            raise DataError(
                "the dataset has no prompt_id column, which names each prompt's task: make it with "
                "`healthbench export --format trl`"
            )
        if len(prompt_id) != len(completions):
            raise DataError(f"{len(completions)} completions but {len(prompt_id)} prompt_ids")
        rewards = await source.grade(list(zip(prompt_id, completions, strict=True)))
        for index, reward in enumerate(rewards):
            if reward.reward is None:
                logger.warning("no reward for completion %d (%s)", index, reward.error)
        if log_metric is not None:
            for axis, mean in axis_means(rewards).items():
                log_metric(f"{NAME}/{axis.removeprefix(AXIS_PREFIX)}", mean)
            log_metric(f"{NAME}/ungraded", float(sum(reward.reward is None for reward in rewards)))
            if in_process:  # what the step paid for, and what it reused (a server says its own in its log)
                log_metric(f"{NAME}/grader_calls", float(sum(reward.paid_calls for reward in rewards)))
                log_metric(f"{NAME}/reused_calls", float(sum(reward.reused_calls for reward in rewards)))
        return [reward.reward for reward in rewards]

    # TRL logs a reward function's rewards under its __name__.
    healthbench.__name__ = NAME
    healthbench.__qualname__ = NAME
    return healthbench


class ServedRewards:
    """A step's rewards from a running `healthbench serve` (`POST /rewards`, docs/deploy.md's batch routes): one
    request per step, under the server's token; the server's key and budget grade it."""

    def __init__(self, server_url: str, token: str | None, split: str, timeout: float) -> None:
        if not is_http_url(server_url):
            raise SettingsError(
                f"`server_url` {server_url!r} is not a URL (it needs http:// or https://, then the server's host and "
                "port: http://reward-host:8080)"
            )
        self.url = server_url.rstrip("/") + "/rewards"
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.split = split
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    async def grade(self, items: Sequence[tuple[object, object]]) -> list[Reward]:
        """The server's rewards for `items`, in order, each reply read as the in-process rewards read it
        (`reply_text`: `NotAReply` before anything is sent). What the server refuses is raised with its own
        explanation: a refusal of the step (an unknown split or prompt_id, a batch over its bound) is a `DataError`;
        a server out of reach, refusing the token or without a grader key, `EndpointUnusable`; a grader that cannot
        grade or a failure of the server's, `RequestFailed`."""
        replies = [
            ReplyItem(prompt_id=str(prompt_id), reply=reply_text(reply, index, prompt_id))
            for index, (prompt_id, reply) in enumerate(items)
        ]
        request = RewardsRequest(split=self.split, items=replies)
        try:
            async with (
                aiohttp.ClientSession(timeout=self.timeout) as http,
                http.post(self.url, json=request.model_dump(mode="json"), headers=self.headers) as response,
            ):
                text = await response.text()
                status = response.status
        except aiohttp.ClientConnectionError as exc:
            raise EndpointUnusable(
                self.url, f"cannot be reached: {exc}", refused=False, role="the reward server's"
            ) from None
        except TimeoutError:
            raise RequestFailed(f"the reward server {self.url} gave no answer in {self.timeout.total:g} s", 1) from None
        if status != 200:
            raise self._refusal(status, text)
        return [Reward.of(result) for result in self._results(text, len(items))]

    def _refusal(self, status: int, text: str) -> HealthBenchError:
        """The error of an answer other than 200, with the server's own explanation (its JSON `detail`)."""
        said = f"(HTTP {status}): {server_detail(text)}"
        if status in (401, 403):
            return EndpointUnusable(self.url, f"refused the token {said}", refused=True, role="the reward server's")
        if status == 503:
            return EndpointUnusable(self.url, f"cannot grade {said}", refused=True, role="the reward server's")
        if 400 <= status < 500:
            return DataError(f"the reward server {self.url} refused the step {said}")
        return RequestFailed(
            f"the reward server {self.url} failed the step {said}", 1, status=status, body=text.encode()
        )

    def _results(self, text: str, count: int) -> list[RewardResult]:
        """The answer's results, one per item sent; `DataError` for an answer of another shape."""
        try:
            results = RewardsAnswer.model_validate_json(text).results
        except ValidationError:
            results = None
        if results is None or len(results) != count:
            raise DataError(f"the reward server's answer is not {count} results: {text[:200]!r}")
        return results


def server_detail(text: str) -> str:
    """What a server said in an answer's body: its JSON `detail` (FastAPI's, and `serve`'s door's), else the body
    itself, cut to 500 characters."""
    try:
        detail = json.loads(text).get("detail")
    except (ValueError, AttributeError):
        detail = None
    said = detail if isinstance(detail, str) else text
    return said[:500] or "(no body)"
