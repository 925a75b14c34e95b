"""firehorse 0.1.4's react agent, unmodified, against `healthbench serve`: the library recipe of
docs/integrations.md, as written there, with a model that calls `answer` through Chat Completions (firehorse's
`openrouter/` provider) and through the Responses API (its `openai/` provider). Every reward equals `healthbench
grade`'s for the reply the model submitted, and a reply that cannot be graded stops the run instead of scoring 0.

Runs where firehorse is installed (`.venv-clients`, made by `scripts/dev test`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from healthbench.integrations.openreward.deployment import answer_prompt_text
from healthbench.testing import GRADER_MARKER, FakeOpenAI
from healthbench.testing.agent import answer_reply
from tests.conftest import write_jsonl
from tests.reference import KEY, made_up_rows
from tests.serving import doc_function, graded_by_cli, served

pytest.importorskip("firehorse")

from healthbench.data.loading import load_rows

ROWS = made_up_rows()[:5]
TOKEN = "firehorse-token-0123456789abcdef"  # the server's
FAILING = {"on": False}


def grader_fails(body: dict[str, Any]) -> bool:
    messages = body.get("messages")
    return FAILING["on"] and isinstance(messages, list) and GRADER_MARKER in str(messages[-1].get("content"))


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(fail_always=grader_fails) as server:
        yield server


def test_the_react_agent_gets_grades_rewards_through_both_apis(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    rows = load_rows(data)
    run = doc_function("firehorse_healthbench.py", "run")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-policy-0123456789")  # the model's key, read by firehorse's providers
    monkeypatch.setenv("HEALTHBENCH_GRADER_API_KEY", KEY)  # the recipe sends it as the session's secret
    monkeypatch.setenv("OPENREWARD_API_KEY", TOKEN)  # the recipe's client sends it as X-API-Key
    assert fake.base_url
    rewards: dict[str, list[float | None]] = {}
    with served(data, fake.base_url, env={"HEALTHBENCH_SERVER_TOKEN": TOKEN}) as url:
        for model in ("openrouter/policy", "openai/policy"):
            fake.reset()
            rewards[model] = asyncio.run(run(url, model, provider_url=fake.base_url))
            asked = [body for body in fake.bodies if body.get("tools")]
            assert len(asked) == len(rows)  # one model turn per task: `answer` finished the episode
            FAILING["on"] = True
            try:
                with pytest.raises(RuntimeError, match=r"task 0: .*could not be graded"):
                    asyncio.run(run(url, model, provider_url=fake.base_url, limit=1))
            finally:
                FAILING["on"] = False
    # The Responses API's model got the prompt as the user's input, Chat Completions' after a system message.
    replies = {row.prompt_id: answer_reply(answer_prompt_text(row.prompt)) for row in rows}
    graded = graded_by_cli(tmp_path, data, replies, fake.base_url)
    expected = [graded[row.prompt_id]["score"] for row in rows]
    for model, got in rewards.items():
        assert got == pytest.approx(expected, abs=1e-9), model
    assert len(set(expected)) > 1
