"""What one request may ask of `healthbench serve`, through real HTTP against a served process (with a token, and
the fake grader counting every call): a 50 MB body is refused with 413 before it is read (the server's peak memory
does not grow by anything like it) and the server stays healthy; a group of 1,000 candidates, a reply longer than
the bound, and a group sent after the session's episode finished are refused before any grader call; hostile
requests (broken JSON, JSON nested thousands deep, bad headers, a body cut short, garbage on the socket) leave no
traceback in the log, and no log line carries more than an excerpt of what was sent.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

pytest.importorskip("openreward")

from openreward import AsyncOpenReward, Message
from openreward.api.environments.types import TextBlock
from openreward.api.errors import ScoreGroupFailed, ToolFailed

from healthbench.integrations.openreward.access import MAX_REPLY_CHARS
from healthbench.testing import FakeOpenAI
from tests.conftest import Serving
from tests.reference import KEY, made_up_rows
from tests.serving import log_until_marker, peak_memory_kb, server_pid

ROWS = made_up_rows()[:2]
TOKEN = "token-0123456789abcdef-bounds"
AUTH = {"X-API-Key": TOKEN}
SERVING = Serving(
    env={"HEALTHBENCH_SERVER_TOKEN": TOKEN, "HEALTHBENCH_GRADER_API_KEY": KEY}, not_in_output=("Traceback",)
)
MB = 1024 * 1024
# What a 50 MB body may add to the server's peak memory: the body bound (8 MB) and a little; reading the body whole
# would add at least its 50 MB, and parsing and grading it about 1.7 GB (measured before the bound).
PEAK_GROWTH_KB = 20 * 1024


async def post(url: str, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http:
        options: dict[str, Any] = (
            {"data": body} if isinstance(body, bytes) or not isinstance(body, dict) else {"json": body}
        )
        async with http.post(url + path, headers={**AUTH, **(headers or {})}, **options) as response:
            return response.status, await response.text()


async def chunks(size: int) -> AsyncIterator[bytes]:
    """A body sent in chunks, without a length (HTTP chunked encoding)."""
    for _ in range(size // MB):
        yield b"x" * MB


def test_a_50_mb_body_is_refused_before_it_is_read(server: tuple[str, list[str]], module_fake: FakeOpenAI) -> None:
    url, lines = server
    pid = server_pid(lines)
    module_fake.reset()
    before = peak_memory_kb(pid)
    big = b'{"split": "test", "index": 0, "task_spec": {"reply": "' + b"x" * (50 * MB) + b'"}}'
    for path in ("/create", "/healthbench/call", "/healthbench/score_group"):
        status, text = asyncio.run(post(url, path, big, {"X-Session-ID": "s-0001", "Content-Type": "application/json"}))
        assert status == 413 and "at most 8,388,608" in json.loads(text)["detail"], text
        status, text = asyncio.run(post(url, path, chunks(50 * MB), {"X-Session-ID": "s-0001"}))
        assert status == 413 and "--max-request-bytes" in text, text
    del big
    assert peak_memory_kb(pid) - before < PEAK_GROWTH_KB
    assert module_fake.requests_total == 0
    health = asyncio.run(post(url, "/ping", {}))  # a request after: the server answers as ever
    assert health[0] == 400 and "X-Session-ID" in health[1]
    log = log_until_marker(url, lines, 0, AUTH)
    assert log.count(" request_too_large ") == 6


async def session_calls(url: str, action: str, **options: Any) -> Exception:
    """Open a session of task 0 with the SDK's client and do `action` on it; the error it raised (it must)."""
    client = AsyncOpenReward(api_key=TOKEN)
    env = client.environments.get("healthbench", variant="healthbench_answer", base_url=url)
    try:
        async with env.session(split="test", index=0, secrets={"OPENAI_API_KEY": KEY}) as session:
            if action == "group":
                await session.score_group(options["group"])
            elif action == "answer":
                await session.call_tool("answer", {"response": options["reply"]})
            else:  # answer, then a group on the finished episode
                assert (await session.call_tool("answer", {"response": "Rest and fluids."})).reward is not None
                options["graded"].append(options["fake"].requests_total)
                await session.score_group([candidate("Rest.")])
    except Exception as exc:
        return exc
    finally:
        await client.environments.aclose()
    raise AssertionError("no error")


def candidate(text: str) -> list[Any]:
    return [Message(role="assistant", blocks=[TextBlock(text=text)])]


def test_work_past_the_bounds_is_refused_before_any_grader_call(
    server: tuple[str, list[str]], module_fake: FakeOpenAI
) -> None:
    url, lines = server
    module_fake.reset()
    start = len(lines)
    error = asyncio.run(session_calls(url, "group", group=[candidate(f"Reply {i}.") for i in range(1000)]))
    assert isinstance(error, ScoreGroupFailed) and "a group of 1,000 candidates" in str(error)
    assert "at most 64 (healthbench serve --max-group-size)" in str(error)
    long = "x" * (MAX_REPLY_CHARS + 1)
    error = asyncio.run(session_calls(url, "answer", reply=long))
    assert isinstance(error, ToolFailed) and f"the reply is {MAX_REPLY_CHARS + 1:,} characters" in str(error)
    assert "--max-reply-chars" in str(error)
    error = asyncio.run(session_calls(url, "group", group=[candidate("Rest."), candidate("Fluids."), candidate(long)]))
    assert isinstance(error, ScoreGroupFailed) and "candidate 2: the reply is" in str(error)
    assert module_fake.requests_total == 0
    log = log_until_marker(url, lines, start, AUTH)
    assert log.count(" score_group_failed ") == 2 and log.count(" tool_call_failed ") == 1 and long not in log
    # A group sent on a session whose episode has finished: refused, nothing more asked of the grader.
    graded: list[int] = []
    error = asyncio.run(session_calls(url, "finished", fake=module_fake, graded=graded))
    assert isinstance(error, ScoreGroupFailed) and "episode has finished" in str(error)
    assert graded == [module_fake.requests_total] and graded[0] == len(ROWS[0]["rubrics"])


def hostile(url: str) -> list[int]:
    """Requests that a server once answered with a traceback in its log: each one's status (0: no answer)."""
    host, port = url.removeprefix("http://").split(":")

    def sent(data: bytes) -> int:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            answer = sock.recv(100)
        return int(answer.split()[1]) if answer.startswith(b"HTTP/1.1 ") else 0

    session = {"X-Session-ID": "hostile-0001"}
    secrets = base64.b64encode(json.dumps({"OPENAI_API_KEY": "x"}).encode()).decode()
    nested = base64.b64encode(b"[" * 8000).decode()
    requests: list[tuple[str, Any, dict[str, str]]] = [
        ("/create", b'{"split": "te', {**session, "Content-Type": "application/json"}),
        ("/create", b'{"split": ' + b"[" * 100_000, {**session, "Content-Type": "application/json"}),
        ("/create", {"split": "y" * MB, "index": 0}, session),
        ("/create", {"split": "test", "index": 0}, {**session, "X-Secrets": "!!not base64"}),
        ("/create", {"split": "test", "index": 0}, {**session, "X-Secrets": secrets}),
        ("/create", {"split": "test", "index": 0}, {**session, "X-Secrets": nested}),
        ("/create", {"split": "test", "index": 0}, {"X-Session-ID": "s" * 10_000}),
        ("/create", {"split": "test", "index": 10**30}, session),
        ("/create", {"split": "test", "index": 0, "extra": "z" * MB}, session),
        ("/create", {"split": "test", "index": 0}, session),  # made: the requests below are of a session there is
        ("/healthbench/call", {"name": "respond" * 50_000, "input": {}}, session),
        ("/healthbench/call", {"name": "respond", "input": {"response": ["z" * MB]}}, session),
        ("/healthbench/score_group", {"candidates": "x" * MB}, session),
        ("/ping", {}, {}),
    ]
    statuses = [asyncio.run(post(url, path, body, headers))[0] for path, body, headers in requests]
    statuses.append(sent(b"GARBAGE \x00\x01\r\n\r\n"))
    statuses.append(
        sent(f"POST /create HTTP/1.1\r\nHost: x\r\nX-API-Key: {TOKEN}\r\nContent-Length: 9x\r\n\r\n".encode())
    )
    statuses.append(
        sent(f"POST /create HTTP/1.1\r\nHost: x\r\nX-API-Key: {TOKEN}\r\nContent-Length: 100\r\n\r\n{{".encode())
    )
    two = f"X-API-Key: {TOKEN}\r\nX-Session-ID: a\r\nX-Session-ID: b"
    statuses.append(sent(f"GET /healthbench/prompt HTTP/1.1\r\nHost: x\r\n{two}\r\n\r\n".encode()))
    return statuses


def test_hostile_requests_leave_no_traceback_and_only_excerpts_in_the_log(
    server: tuple[str, list[str]], module_fake: FakeOpenAI
) -> None:
    url, lines = server
    module_fake.reset()
    start = len(lines)
    statuses = hostile(url)
    assert statuses[9] == 200 and all(status in (0, 200, 400, 422) for status in statuses), statuses
    log = log_until_marker(url, lines, start, AUTH)
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    assert module_fake.requests_total == 0
    # Every line is short: what a client sent is in it as an excerpt of at most a few hundred characters a field.
    assert max(len(line) for line in log.splitlines()) < 2_000
    assert "y" * 400 not in log and "respond" * 100 not in log
