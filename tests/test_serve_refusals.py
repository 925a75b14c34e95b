"""What `healthbench serve` says when a client gets a name wrong or a reply cannot be graded, through the SDK's own
client against a served process: an environment or variant it does not serve (by path, by the SDK's `variant`,
by `X-Deployment`) is an HTTP 404 naming the ones it serves, an unknown split names the splits, an unknown tool
names the tools, each with one log line; a reply that cannot be graded is one log line naming the task, the
rubric item and the cause, with a traceback only at `--log-level debug`.

A request's log lines are told apart by a marker (`tests.serving.log_until_marker`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytest.importorskip("openreward")

from openreward import AsyncOpenReward, Message
from openreward.api.environments.types import TextBlock
from openreward.api.errors import ScoreGroupFailed, ToolCallError, ToolFailed

from healthbench.testing import FakeOpenAI
from tests.reference import KEY, made_up_rows
from tests.serving import UNGRADABLE, log_until_marker, served_with_log

ROWS = made_up_rows()[:3]
SERVED = "'healthbench' and 'healthbench_answer'"
TYPO = "healthbench-answer"


def logged(url: str, lines: list[str], action: Callable[[AsyncOpenReward], Awaitable[Any]]) -> tuple[Exception, str]:
    """Run `action` with an SDK client; the error it raised (it must raise) and the server's log lines of it."""

    async def run() -> Exception:
        client = AsyncOpenReward(api_key="local")
        try:
            await action(client)
        except Exception as exc:
            return exc
        finally:
            await client.environments.aclose()
        raise AssertionError("no error")

    start = len(lines)
    error = asyncio.run(run())
    return error, log_until_marker(url, lines, start)


def count(log: str, event: str) -> int:
    return sum(f" {event} " in line for line in log.splitlines())


@pytest.mark.parametrize(
    ("how", "get"),
    [
        # The SDK's variant names the environment in the path (`/healthbench-answer/tools`) and in `/create`.
        ("variant", lambda client, url: client.environments.get("healthbench", variant=TYPO, base_url=url)),
        # A name without a variant is sent as X-Deployment with bare paths, as TRL sends its env_name.
        ("X-Deployment", lambda client, url: client.environments.get(TYPO, base_url=url)),
    ],
)  # fmt: skip
def test_an_environment_not_served_is_a_404_naming_the_served_ones(
    server: tuple[str, list[str]], how: str, get: Callable[[AsyncOpenReward, str], Any]
) -> None:
    url, lines = server

    async def tools(client: AsyncOpenReward) -> None:
        await get(client, url).list_tools()

    async def session(client: AsyncOpenReward) -> None:
        async with get(client, url).session(split="test", index=0, secrets={"OPENAI_API_KEY": KEY}):
            pass

    for action in (tools, session):
        error, log = logged(url, lines, action)
        assert "404" in str(error) and "'healthbench-answer'" in str(error) and SERVED in str(error), (how, error)
        assert count(log, "unknown_environment") == 1, log


def test_a_raw_request_for_an_unknown_path_names_the_environments(server: tuple[str, list[str]]) -> None:
    url, lines = server

    async def get() -> tuple[int, Any]:
        async with aiohttp.ClientSession() as http, http.get(f"{url}/healthbench-answer/tools") as response:
            return response.status, await response.json()

    start = len(lines)
    status, body = asyncio.run(get())
    assert status == 404 and SERVED in body["detail"]
    assert count(log_until_marker(url, lines, start), "unknown_environment") == 1


def test_an_unknown_split_names_the_splits(server: tuple[str, list[str]]) -> None:
    url, lines = server

    async def tasks(client: AsyncOpenReward) -> None:
        await client.environments.get("healthbench", variant="healthbench_answer", base_url=url).num_tasks("dev")

    async def session(client: AsyncOpenReward) -> None:
        async with client.environments.get("healthbench_answer", base_url=url).session(split="dev", index=0):
            pass

    for action in (tasks, session):
        error, log = logged(url, lines, action)
        # The data's training splits are served beside it: 3 rows leave validation empty, so it is not.
        assert "no split 'dev' here: the splits are 'test', 'train' and 'heldout'" in str(error), error
        assert count(log, "unknown_split") == 1, log


def test_an_unknown_tool_names_the_tools(server: tuple[str, list[str]]) -> None:
    url, _ = server

    async def run() -> ToolCallError:
        client = AsyncOpenReward(api_key="local")
        env = client.environments.get("healthbench", variant="healthbench_answer", base_url=url)
        try:
            async with env.session(split="test", index=0, secrets={"OPENAI_API_KEY": KEY}) as session:
                with pytest.raises(ToolCallError) as refused:
                    await session.call_tool("answr", {"response": "x"})
                return refused.value
        finally:
            await client.environments.aclose()

    refusal = asyncio.run(run())
    assert refusal.reason == "not_found"
    assert "'answr' is not a tool of healthbench_answer: its tools are 'answer', 'respond' (the terminal tool)" in str(
        refusal
    )


async def ungradable_answer(url: str) -> None:
    client = AsyncOpenReward(api_key="local")
    env = client.environments.get("healthbench", variant="healthbench_answer", base_url=url)
    try:
        async with env.session(split="test", index=0, secrets={"OPENAI_API_KEY": KEY}) as session:
            await session.call_tool("answer", {"response": f"{UNGRADABLE}: rest and fluids."})
    finally:
        await client.environments.aclose()


def test_a_reply_that_cannot_be_graded_is_one_log_line(server: tuple[str, list[str]]) -> None:
    url, lines = server
    start = len(lines)
    with pytest.raises(ToolFailed, match="could not be graded"):
        asyncio.run(ungradable_answer(url))
    log = log_until_marker(url, lines, start)
    [line] = [line for line in log.splitlines() if " tool_call_failed " in line]
    # Every item of a reply marked UNGRADABLE fails: whichever failed first is named, with its cause.
    task, items = ROWS[0]["prompt_id"], "|".join(re.escape(item["criterion"]) for item in ROWS[0]["rubrics"])
    assert re.search(f"task {task}: rubric item '({items})' could not be graded: .+ \\(after 2 attempts\\)", line)
    assert "Traceback" not in log

    async def group(client: AsyncOpenReward) -> None:
        env = client.environments.get("healthbench", variant="healthbench_answer", base_url=url)
        async with env.session(split="test", index=0, secrets={"OPENAI_API_KEY": KEY}) as session:
            replies = ["Rest and fluids.", f"{UNGRADABLE}: rest."]
            await session.score_group([[Message(role="assistant", blocks=[TextBlock(text=r)])] for r in replies])

    error, log = logged(url, lines, group)
    assert isinstance(error, ScoreGroupFailed) and "candidate 1: task" in str(error)
    [line] = [line for line in log.splitlines() if " score_group_failed " in line]
    assert f"candidate 1: task {task}: rubric item " in line and "could not be graded" in line
    assert "Traceback" not in log


def test_at_debug_level_the_failure_has_its_traceback(data: Path, module_fake: FakeOpenAI) -> None:
    assert module_fake.base_url
    with served_with_log(data, module_fake.base_url, "--log-level", "debug") as (url, lines):
        start = len(lines)
        with pytest.raises(ToolFailed):
            asyncio.run(ungradable_answer(url))
        log = log_until_marker(url, lines, start)
    assert "tool_call_failed" in log and "Traceback" in log and "GradingError" in log
