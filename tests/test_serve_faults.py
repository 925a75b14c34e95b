"""`serve` when the parts around it fail or change: restarted under a trainer's open session (the next call on it
is told the session is lost, naming it and the restart, and is never rewarded; a new session works at once), and
its log read through a pipe (plain lines, no colour codes)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import ClientResponseError
from openreward import AsyncOpenReward
from openreward.api.errors import SessionTerminatedError

from healthbench.integrations.openreward.guard import short_id
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY
from tests.serving import log_until_marker, served, served_with_log

SECRETS = {"OPENAI_API_KEY": KEY}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "rows.jsonl", [make_row(f"t{i}") for i in range(3)])


def test_a_restarted_server_names_the_lost_session_and_a_new_one_works(data: Path, fake: FakeOpenAI) -> None:
    async def trainer() -> dict[str, Any]:
        client = AsyncOpenReward(api_key="local")
        seen: dict[str, Any] = {}
        with served(data, fake.base_url) as first:
            env = client.environments.get("healthbench", base_url=first)
            session = env.session(split="test", index=0, secrets=SECRETS)
            await session.__aenter__()
            seen["prompt"] = await session.get_prompt()
            seen["sid"] = session.sid
            port = str(urlsplit(first).port)
        graded_before = fake.requests_total
        # The same address, a new process: what a deploy, a crash or an OOM kill leaves a trainer facing.
        with served(data, fake.base_url, "--port", port) as second:
            assert second == first
            seen["results"], seen["errors"] = [], []
            for call in (session.get_prompt(), session.call_terminal_tool("Rest and drink water.")):
                try:
                    seen["results"].append(await call)
                except (ClientResponseError, SessionTerminatedError) as exc:
                    seen["errors"].append(exc)
            seen["graded_for_lost"] = fake.requests_total - graded_before
            async with env.session(split="test", index=1, secrets=SECRETS) as fresh:
                assert await fresh.get_prompt()
                seen["fresh"] = await fresh.call_terminal_tool("Rest and drink water.")
            await session.__aexit__(None, None, None)
        await client.environments.aclose()
        return seen

    seen = asyncio.run(trainer())
    assert seen["prompt"] and seen["results"] == []  # no reward, and no prompt, for the lost session
    assert seen["graded_for_lost"] == 0
    assert len(seen["errors"]) == 2
    for error in seen["errors"]:
        said = str(error)
        assert f"session {short_id(seen['sid'])} is not open on this server" in said, said
        assert "a restarted server has none of the sessions it had" in said and "create a new session" in said
        assert "Active environment not found" not in said
    assert isinstance(seen["errors"][0], ClientResponseError) and seen["errors"][0].status == 410
    assert seen["fresh"].finished is True and seen["fresh"].reward is not None


def test_the_log_through_a_pipe_has_no_colour_codes(data: Path, fake: FakeOpenAI) -> None:
    with served_with_log(data, fake.base_url) as (url, lines):
        log_until_marker(url, lines, 0)
        said = "".join(lines)
    assert "healthbench_serving" in said and "\x1b[" not in said
