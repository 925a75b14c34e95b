"""Over HTTP, against `healthbench serve` in a process of its own, through the OpenReward SDK's own client: the
answer-tool variant by path and by the `X-Deployment` header (how TRL names it), group scoring, the default
environment setting and the SDK's grader channel. Every reward equals `healthbench grade`'s for the same reply.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytest.importorskip("openreward")

from openreward import AsyncOpenReward, GroupCandidate, Message
from openreward.api.environments.types import ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock
from openreward.api.errors import ScoreGroupFailed, ToolCallError

from healthbench.integrations.openreward.deployment import ANSWER_INSTRUCTION
from healthbench.testing import FakeOpenAI
from tests.reference import KEY, made_up_rows
from tests.serving import UNGRADABLE, doc_function, graded_by_cli, served

ROWS = made_up_rows()[:5]
# No SERVING: the server (`url`) starts as by default, `healthbench` at the bare paths.


def reply(index: int) -> str:
    return f"Reply {index}: rest, fluids, and a doctor if it persists."


async def answers(url: str, name: str, variant: str | None) -> dict[str, Any]:
    """Each task answered through the `answer` tool of the environment `name`/`variant` names; what was seen."""
    client = AsyncOpenReward(api_key="local")
    env = client.environments.get(name, variant=variant, base_url=url)
    seen: dict[str, Any] = {"tools": [t.name for t in await env.list_tools()], "rewards": {}}
    try:
        for index, row in enumerate(ROWS):
            async with env.session(split="test", index=index, secrets={"OPENAI_API_KEY": KEY}) as session:
                [block] = await session.get_prompt()
                assert block.text.endswith("\n\n" + ANSWER_INSTRUCTION)
                assert (await session.terminal_tool()).name == "respond"
                output = await session.call_tool("answer", {"response": reply(index)})
                assert output.finished is True
                seen["rewards"][row["prompt_id"]] = output.reward
                with pytest.raises(ToolCallError) as again:
                    await session.call_tool("answer", {"response": "a second answer"})
                assert again.value.reason == "episode_finished"
    finally:
        await client.environments.aclose()
    return seen


def expected(tmp: Path, data: Path, fake: FakeOpenAI, out: str = "grade") -> dict[str, float]:
    assert fake.base_url
    graded = graded_by_cli(tmp, data, {row["prompt_id"]: reply(i) for i, row in enumerate(ROWS)}, fake.base_url, out)
    return {prompt_id: record["score"] for prompt_id, record in graded.items()}


def group_scores(tmp: Path, data: Path, fake: FakeOpenAI, row: dict[str, Any], replies: list[str]) -> list[float]:
    """`healthbench grade`'s score of each of `replies` to `row`, each graded in a run of its own."""
    assert fake.base_url
    pid = row["prompt_id"]
    return [
        graded_by_cli(tmp, data, {pid: text}, fake.base_url, f"g{i}")[pid]["score"] for i, text in enumerate(replies)
    ]


def test_the_variant_by_path_and_by_header_rewards_as_grade_does(
    url: str, data: Path, module_fake: FakeOpenAI, tmp_path: Path
) -> None:
    scores = expected(tmp_path, data, module_fake)
    # The SDK's variant (a path), TRL's env_name (bare paths and X-Deployment), and a platform's owner/name.
    for name, variant in (
        ("healthbench", "healthbench_answer"),
        ("healthbench_answer", None),
        ("me/healthbench_answer", None),
    ):
        seen = asyncio.run(answers(url, name, variant))
        assert seen["tools"] == ["answer"], (name, variant)
        assert seen["rewards"] == pytest.approx(scores, abs=1e-9)


def test_the_default_environment_is_unchanged(url: str, data: Path, module_fake: FakeOpenAI, tmp_path: Path) -> None:
    async def run() -> tuple[list[Any], dict[str, float]]:
        client = AsyncOpenReward(api_key="local")
        env = client.environments.get("healthbench", base_url=url)
        rewards = {}
        try:
            tools = await env.list_tools()
            for index, row in enumerate(ROWS):
                async with env.session(split="test", index=index, secrets={"OPENAI_API_KEY": KEY}) as session:
                    [block] = await session.get_prompt()
                    assert ANSWER_INSTRUCTION not in block.text
                    assert await session.is_assistant_message_final()
                    rewards[row["prompt_id"]] = (await session.call_terminal_tool(reply(index))).reward
        finally:
            await client.environments.aclose()
        return tools, rewards

    tools, rewards = asyncio.run(run())
    assert tools == []
    assert rewards == pytest.approx(expected(tmp_path, data, module_fake), abs=1e-9)


def test_the_header_routes_only_the_variant(url: str) -> None:
    async def tools(path: str, deployment: str | None) -> list[str]:
        headers = {"X-Deployment": deployment} if deployment else {}
        async with aiohttp.ClientSession() as http, http.get(url + path, headers=headers) as response:
            assert response.status == 200, await response.text()
            return [tool["name"] for tool in (await response.json())["tools"]]

    async def run() -> dict[tuple[str, str | None], list[str]]:
        cases = [("/tools", "HealthBench_Answer"), ("/tools", "healthbench"), ("/tools", "env"), ("/tools", None)]
        cases += [("/healthbench/tools", "healthbench_answer"), ("/healthbench_answer/tools", "healthbench")]
        return {case: await tools(*case) for case in cases}

    assert asyncio.run(run()) == {
        ("/tools", "HealthBench_Answer"): ["answer"],
        ("/tools", "healthbench"): [],  # the deployment's own name: the default environment
        ("/tools", "env"): [],  # TRL's name when given none
        ("/tools", None): [],
        ("/healthbench/tools", "healthbench_answer"): [],  # a path that names an environment wins
        ("/healthbench_answer/tools", "healthbench"): ["answer"],
    }


def candidates(replies: list[str]) -> list[Any]:
    """The shapes a trainer sends: a bare final message, a trajectory through `answer`, two text blocks."""
    question = Message(role="user", blocks=[TextBlock(text="the task")])
    call = ToolCallBlock(id="call_1", name="answer", input={"response": replies[1]})
    result = ToolResultBlock(tool_call_id="call_1", blocks=[TextBlock(text="Graded.")])
    first, second = replies[2].split("\n")
    return [
        [Message(role="assistant", blocks=[TextBlock(text=replies[0])])],
        GroupCandidate(
            messages=[
                question,
                Message(role="assistant", blocks=[ReasoningBlock(text="think"), call]),
                Message(role="user", blocks=[result]),
                Message(role="assistant", blocks=[TextBlock(text="Done.")]),
            ],
            metadata={"rollout": 1},
        ),
        [question, Message(role="assistant", blocks=[TextBlock(text=first), TextBlock(text=second)])],
    ]


def test_score_group_on_both_environments_rewards_as_grade_does(
    url: str, data: Path, module_fake: FakeOpenAI, tmp_path: Path
) -> None:
    replies = ["Drink water.", "See a doctor today.", "Rest.\nCall if worse."]
    row = ROWS[1]
    assert module_fake.base_url
    scores = group_scores(tmp_path, data, module_fake, row, replies)

    async def run(variant: str | None) -> dict[str, Any]:
        client = AsyncOpenReward(api_key="local")
        env = client.environments.get("healthbench", variant=variant, base_url=url)
        seen: dict[str, Any] = {}
        try:
            async with env.session(split="test", index=1, secrets={"OPENAI_API_KEY": KEY}) as session:
                seen["supported"] = await session.supports_score_group()
                seen["scores"] = await session.score_group(candidates(replies))
                no_text = [Message(role="assistant", blocks=[ReasoningBlock(text="only thinking")])]
                for group in ([candidates(replies)[0], no_text], candidates([*replies[:2], f"{UNGRADABLE}\nx"])):
                    with pytest.raises(ScoreGroupFailed) as failed:
                        await session.score_group(group)
                    seen.setdefault("failures", []).append(str(failed.value))
                # A failed group leaves the session usable.
                seen["after"] = await session.score_group(candidates(replies)[:1])
        finally:
            await client.environments.aclose()
        return seen

    for variant in (None, "healthbench_answer"):
        seen = asyncio.run(run(variant))
        assert seen["supported"] is True
        assert [s.reward for s in seen["scores"]] == pytest.approx(scores, abs=1e-9)
        assert [s.metadata["prompt_id"] for s in seen["scores"]] == [row["prompt_id"]] * 3
        assert [s.metadata["score"] for s in seen["scores"]] == pytest.approx(scores, abs=1e-9)
        assert seen["after"][0].reward == pytest.approx(scores[0], abs=1e-9)
        no_text, ungradable = seen["failures"]
        assert "candidate 1: it has no assistant text to grade" in no_text
        assert (
            f"candidate 2: task {row['prompt_id']}: rubric item" in ungradable and "could not be graded" in ungradable
        )
        assert KEY not in ungradable


def test_the_variant_as_default_with_the_sdk_grader_channel(
    data: Path, module_fake: FakeOpenAI, tmp_path: Path
) -> None:
    """HEALTHBENCH_DEFAULT_ENVIRONMENT makes the variant what a client that names none reaches (OpenReward's
    cookbook loops); the grader's endpoint and key come from the SDK's CHAT_BASE_URL and CHAT_API_KEY."""
    assert module_fake.base_url
    channel = {"HEALTHBENCH_DEFAULT_ENVIRONMENT": "healthbench_answer", "CHAT_BASE_URL": module_fake.base_url}
    scores = expected(tmp_path, data, module_fake)

    async def run(server: str) -> dict[str, Any]:
        client = AsyncOpenReward(api_key="local")
        try:
            bare = client.environments.get("healthbench", base_url=server)
            terminal = client.environments.get("healthbench", variant="healthbench", base_url=server)
            seen: dict[str, Any] = {"bare": await bare.list_tools(), "terminal": await terminal.list_tools()}
            rewards = {}
            for index, row in enumerate(ROWS):
                secrets: dict[str, Any] = {"chat_api_key": (KEY, ["127.0.0.1"])} if index % 2 else {}
                async with bare.session(split="test", index=index, secrets=secrets) as session:
                    rewards[row["prompt_id"]] = (await session.call_tool("answer", {"response": reply(index)})).reward
            seen["rewards"] = rewards
            return seen
        finally:
            await client.environments.aclose()

    module_fake.reset()
    with served(data, None, env={**channel, "CHAT_API_KEY": "sk-server-chat-key"}) as server:
        seen = asyncio.run(run(server))
    assert [t.name for t in seen["bare"]] == ["answer"] and seen["terminal"] == []
    assert seen["rewards"] == pytest.approx(scores, abs=1e-9)
    assert set(module_fake.auth_headers) == {f"Bearer {KEY}", "Bearer sk-server-chat-key"}


def test_the_documented_score_group_recipe(url: str, data: Path, module_fake: FakeOpenAI, tmp_path: Path) -> None:
    score_replies = doc_function("score_group.py", "score_replies")
    replies = [reply(i) for i in range(4)]
    row = ROWS[2]
    assert module_fake.base_url
    expected = group_scores(tmp_path, data, module_fake, row, replies)
    assert asyncio.run(score_replies(url, 2, replies, KEY)) == pytest.approx(expected, abs=1e-9)
