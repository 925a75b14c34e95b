"""In process: the answer-tool variant, group scoring on both environments, and where the grader key comes from.

The environment classes are driven directly, graded by the loopback fake; every reward is compared with the
default environment's terminal tool, whose rewards test_environment.py holds to OpenAI's formula.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openreward")

from openreward.environments.types import GroupCandidate, Message, ReasoningBlock, TextBlock, ToolCallBlock

from healthbench.data.loading import load_rows
from healthbench.data.schema import Row
from healthbench.errors import CandidateError, GradingError
from healthbench.grading.settings import GraderConfig, session_grader_key
from healthbench.integrations.openreward.deployment import ANSWER_INSTRUCTION, Deployment, prompt_text
from healthbench.integrations.openreward.environment import HealthBench, HealthBenchAnswer, candidate_reply
from healthbench.testing import FakeOpenAI
from tests.reference import KEY, made_up_rows
from tests.serving import UNGRADABLE


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[Row]:
    path = tmp_path_factory.mktemp("rows") / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in made_up_rows()[:6]), encoding="utf-8")
    return load_rows(path)


def classes(rows: list[Row], fake: FakeOpenAI, **settings: Any) -> tuple[type[HealthBench], type[HealthBench]]:
    """Both environments over one deployment, as the server binds them."""
    config = GraderConfig(base_url=fake.base_url or "", max_attempts=1, **settings)
    deployment = Deployment({"test": rows}, config)
    return HealthBench.bound(deployment), HealthBenchAnswer.bound(deployment)


def spec(row: Row) -> dict[str, str]:
    return {"split": "test", "prompt_id": row.prompt_id}


def text(role: str, *texts: str) -> Message:
    return Message(role=role, blocks=[TextBlock(text=t) for t in texts])


def test_the_variant_lists_answer_keeps_the_terminal_tool_and_asks_for_answer(
    rows: list[Row], module_fake: FakeOpenAI
) -> None:
    plain, answer = classes(rows, module_fake)
    assert answer.name() == "healthbench_answer" and plain.name().lower() == "healthbench"
    listed = answer.list_tools()
    [tool] = listed.tools
    assert tool.name == "answer" and "reply" in tool.description
    assert tool.input_schema["required"] == ["response"]
    field = tool.input_schema["properties"]["response"]
    assert field["type"] == "string" and "reply" in field["description"]
    assert listed.terminal_tool is not None and listed.terminal_tool.name == "respond"
    assert listed.supports_score_group is True
    # The default environment is as it was: no listed tools, the terminal tool, and now group scoring.
    assert plain.list_tools().tools == [] and plain.list_tools().terminal_tool.name == "respond"
    multi = rows[1]  # system, user, assistant, user
    [block] = asyncio.run(answer(spec(multi), {}).get_prompt())
    assert block.text == prompt_text(multi.prompt) + "\n\n" + ANSWER_INSTRUCTION
    [plain_block] = asyncio.run(plain(spec(multi), {}).get_prompt())
    assert plain_block.text == prompt_text(multi.prompt)
    messages = asyncio.run(answer(spec(multi), {}).get_messages())
    expected = [(m.role, m.content) for m in multi.prompt]
    expected[-1] = ("user", multi.prompt[-1].content + "\n\n" + ANSWER_INSTRUCTION)
    assert [(m.role, m.blocks[0].text) for m in messages] == expected


def test_answer_grades_as_the_terminal_tool_and_ends_the_episode(rows: list[Row], module_fake: FakeOpenAI) -> None:
    plain, answer = classes(rows, module_fake)
    rewards = []
    for row in rows:
        reply = f"Reply to {row.prompt_id}: rest and fluids."
        terminal = asyncio.run(plain(spec(row), {"OPENAI_API_KEY": KEY}).call_terminal_tool(reply)).root.output
        env = answer(spec(row), {"OPENAI_API_KEY": KEY})
        called = asyncio.run(env._call_tool("answer", {"response": reply})).root.output
        assert called.finished is True and terminal.finished is True
        assert called.reward == terminal.reward and called.metadata == terminal.metadata
        assert [b.text for b in called.blocks] == [b.text for b in terminal.blocks]
        rewards.append(called.reward)
        again = asyncio.run(env._call_tool("answer", {"response": "again"})).root
        assert again.ok is False and again.reason == "episode_finished"
        # The variant's terminal tool is the same grading, for a harness that does call it.
        via_terminal = asyncio.run(answer(spec(row), {"OPENAI_API_KEY": KEY}).call_terminal_tool(reply)).root.output
        assert via_terminal.reward == called.reward
    assert len(set(rewards)) > 1


def test_an_ungradable_answer_raises_instead_of_scoring(rows: list[Row], module_fake: FakeOpenAI) -> None:
    _, answer = classes(rows, module_fake)
    with pytest.raises(GradingError, match=f"task {rows[0].prompt_id}: rubric item .* could not be graded"):
        asyncio.run(answer(spec(rows[0]), {"OPENAI_API_KEY": KEY})._call_tool("answer", {"response": UNGRADABLE}))


def test_the_reply_of_a_candidate() -> None:
    call = ToolCallBlock(id="c1", name="answer", input={"response": "submitted"})
    thinking = ReasoningBlock(text="hmm")
    cases: list[tuple[list[Message], str | None]] = [
        ([text("assistant", "plain")], "plain"),
        ([text("user", "q"), text("assistant", "first"), text("user", "more?"), text("assistant", "a", "b")], "a\nb"),
        ([Message(role="assistant", blocks=[thinking, call]), text("assistant", "Done.")], "submitted"),
        ([Message(role="assistant", blocks=[ToolCallBlock(id="c", name="respond", input={"response": "r"})])], "r"),
        ([text("assistant", "")], ""),  # an empty reply is a reply, graded as the tool would grade it
        ([text("user", "only the question")], None),
        ([text("assistant", "earlier"), Message(role="assistant", blocks=[thinking])], None),
        ([Message(role="assistant", blocks=[ToolCallBlock(id="c", name="search", input={"q": "x"})])], None),
    ]
    for messages, expected in cases:
        assert candidate_reply(GroupCandidate(messages=messages)) == expected, messages


def test_score_group_gives_each_candidate_the_tools_reward(rows: list[Row], module_fake: FakeOpenAI) -> None:
    plain, answer = classes(rows, module_fake)
    row = rows[1]
    replies = [f"Candidate {i}: keep the child hydrated." for i in range(5)]
    expected = []
    for reply in replies:
        output = asyncio.run(plain(spec(row), {"OPENAI_API_KEY": KEY}).call_terminal_tool(reply)).root.output
        expected.append((output.reward, output.metadata))
    candidates = [
        GroupCandidate(messages=[text("assistant", reply)], metadata={"i": i}) for i, reply in enumerate(replies)
    ]
    for env_cls in (plain, answer):
        scores = asyncio.run(env_cls(spec(row), {"OPENAI_API_KEY": KEY}).score_group(candidates))
        assert [(s.reward, s.metadata) for s in scores] == expected
    assert len({reward for reward, _ in expected}) > 1


def test_score_group_names_the_candidate_it_cannot_score(rows: list[Row], module_fake: FakeOpenAI) -> None:
    _, answer = classes(rows, module_fake)
    env = answer(spec(rows[0]), {"OPENAI_API_KEY": KEY})
    good = GroupCandidate(messages=[text("assistant", "fine")])
    module_fake.reset()
    with pytest.raises(CandidateError, match=r"^candidate 1: it has no assistant text to grade$"):
        asyncio.run(env.score_group([good, GroupCandidate(messages=[text("user", "q")]), good]))
    assert module_fake.requests_total == 0  # refused before any grader call
    ungradable = GroupCandidate(messages=[text("assistant", UNGRADABLE)])
    with pytest.raises(CandidateError, match=f"^candidate 2: task {rows[0].prompt_id}: rubric item") as failed:
        asyncio.run(env.score_group([good, good, ungradable, good]))
    assert "could not be graded" in str(failed.value) and KEY not in str(failed.value)
    assert asyncio.run(env.score_group([])) == []


def test_a_group_is_graded_at_once_under_the_one_budget(rows: list[Row]) -> None:
    with FakeOpenAI(latency=0.05) as slow:
        _, answer = classes(rows, slow, concurrency=3)
        env = answer(spec(rows[0]), {"OPENAI_API_KEY": KEY})
        candidates = [GroupCandidate(messages=[text("assistant", f"reply {i}")]) for i in range(8)]
        scores = asyncio.run(env.score_group(candidates))
        assert len(scores) == 8
        assert slow.requests_total == 8 * len(rows[0].rubrics)
        assert slow.max_in_flight == 3  # the candidates overlap, and never pass the server's budget


# Where the grader key and endpoint come from: one order, in grading.settings.


def test_the_session_key_order() -> None:
    assert session_grader_key({"CHAT_API_KEY": " a ", "openai_api_key": "b"}) == "a"
    assert session_grader_key({"OPENAI_API_KEY": "b", "api_key": "c"}) == "b"
    assert session_grader_key({"chat_api_key": "  ", "OpenAI_Api_Key": "b"}) == "b"
    assert session_grader_key({"api_key": "c", "OPENREWARD_API_KEY": "d"}) is None  # the SDK's own, not a grader's


def test_the_server_key_and_endpoint_order(monkeypatch: pytest.MonkeyPatch) -> None:
    variables = {
        "HEALTHBENCH_GRADER_API_KEY": "project-key",
        "CHAT_API_KEY": "chat-key",
        "OPENAI_API_KEY": "openai-key",
        "HEALTHBENCH_GRADER_BASE_URL": "http://project/v1",
        "CHAT_BASE_URL": "http://chat/v1",
        "OPENAI_BASE_URL": "http://policy/v1",
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)

    def chosen(**given: Any) -> tuple[str | None, str]:
        config = GraderConfig.from_env(served=True, **given)
        return config.api_key.get_secret_value() if config.api_key else None, config.base_url

    assert chosen(base_url="http://flag/v1") == ("project-key", "http://flag/v1")
    assert chosen() == ("project-key", "http://project/v1")
    monkeypatch.delenv("HEALTHBENCH_GRADER_API_KEY")
    monkeypatch.delenv("HEALTHBENCH_GRADER_BASE_URL")
    assert chosen() == ("chat-key", "http://chat/v1")
    monkeypatch.delenv("CHAT_API_KEY")
    monkeypatch.delenv("CHAT_BASE_URL")
    assert chosen() == ("openai-key", "https://api.openai.com/v1")  # never OPENAI_BASE_URL
    # The grading commands keep their own settings: the SDK's channel is the served environment's.
    monkeypatch.setenv("CHAT_API_KEY", "chat-key")
    monkeypatch.setenv("CHAT_BASE_URL", "http://chat/v1")
    config = GraderConfig.from_env()
    assert config.api_key is not None and config.api_key.get_secret_value() == "openai-key"
    assert config.base_url == "https://api.openai.com/v1"


def test_a_session_grades_with_its_chat_api_key_before_its_openai_key(
    rows: list[Row], module_fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAT_API_KEY", "sk-server-chat")
    monkeypatch.setenv("HEALTHBENCH_GRADER_BASE_URL", module_fake.base_url or "")
    deployment = Deployment({"test": rows}, GraderConfig.from_env(served=True, max_attempts=1))
    answer = HealthBenchAnswer.bound(deployment)
    module_fake.reset()
    both = {"chat_api_key": KEY, "OPENAI_API_KEY": "sk-session-openai"}
    asyncio.run(answer(spec(rows[0]), both)._call_tool("answer", {"response": "x"}))
    asyncio.run(answer(spec(rows[0]), {"OPENAI_API_KEY": "sk-session-openai"})._call_tool("answer", {"response": "x"}))
    asyncio.run(answer(spec(rows[0]), {})._call_tool("answer", {"response": "x"}))
    calls = len(rows[0].rubrics)
    assert module_fake.auth_headers == (
        [f"Bearer {KEY}"] * calls + ["Bearer sk-session-openai"] * calls + ["Bearer sk-server-chat"] * calls
    )


def test_serve_refuses_an_unknown_default_environment(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from healthbench.cli import main

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(made_up_rows()[0]) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["serve", "--data", str(data), "--default-environment", "healthbench_tools"])
    assert result.exit_code == 2 and "is not one of 'healthbench', 'healthbench_answer'" in result.output
