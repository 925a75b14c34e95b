"""Who `healthbench serve` lets in, through real HTTP against a served process with a token file of two tokens and
the server's own grader key: every route but `/health` answers 401 without a token or with a wrong one, making no
grader call and no session; the OpenReward SDK's client with `api_key=<token>` gets the rewards `healthbench grade`
gives; a session is used only with the token that created it; the log has a line per session created and per
reward, session ids only shortened, and neither the key nor a token. And where it listens: loopback by default,
and beyond loopback with a key and no token it does not start, saying the three ways out.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytest.importorskip("openreward")

from openreward import AsyncOpenReward

from healthbench.testing import FakeOpenAI
from tests.conftest import Serving
from tests.reference import KEY, made_up_rows
from tests.serving import (
    POLICY_BASE_URL,
    graded_by_cli,
    log_until_marker,
    server_process,
    strip_colour,
)

ROWS = made_up_rows()[:4]
TOKEN_A = "token-a-5f0c1e9d8b7a6f5e4d3c2b1a"
TOKEN_B = "token-b-0a1b2c3d4e5f60718293a4b5"
WRONG = "token-x-ffffffffffffffffffffffff"
SECRETS = {"OPENAI_API_KEY": KEY}
SERVING = Serving(
    token_file=f"# one a line\n{TOKEN_A}\n\n{TOKEN_B}\n",
    env={"HEALTHBENCH_GRADER_API_KEY": KEY},
    not_in_output=(TOKEN_A, TOKEN_B, WRONG),
)


async def raw(url: str, method: str, path: str, **options: Any) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as http, http.request(method, url + path, **options) as response:
        return response.status, await response.text(), dict(response.headers)


def routes(url: str) -> list[tuple[str, str]]:
    """Every route the server has (method, path), from its OpenAPI listing, with the environment named."""
    status, text, _ = asyncio.run(raw(url, "GET", "/openapi.json", headers={"X-API-Key": TOKEN_A}))
    assert status == 200, text
    listed = json.loads(text)["paths"]
    return [
        (method.upper(), path.replace("{env_name}", "healthbench")) for path, ops in listed.items() for method in ops
    ]


def test_every_route_but_health_needs_a_token_and_refusals_cost_nothing(
    server: tuple[str, list[str]], module_fake: FakeOpenAI
) -> None:
    url, lines = server
    every = routes(url)
    assert len(every) >= 14 and ("POST", "/create") in every and ("POST", "/healthbench/score_group") in every
    module_fake.reset()
    start = len(lines)
    candidates = [{"messages": [{"role": "assistant", "blocks": [{"type": "text", "text": "Rest."}]}]}] * 8
    bodies = {"/create": {"split": "test", "index": 0}, "/healthbench/score_group": {"candidates": candidates}}
    refusals = 0
    for method, path in [*every, ("GET", "/docs"), ("GET", "/no-such-route")]:
        if path == "/health":
            continue
        for headers in ({}, {"X-API-Key": WRONG}, {"Authorization": f"Bearer {WRONG}"}, {"Authorization": TOKEN_A}):
            headers = {**headers, "X-Session-ID": "session-of-nobody-0001"}
            status, text, answered = asyncio.run(raw(url, method, path, headers=headers, json=bodies.get(path)))
            assert status == 401, (method, path, headers, text)
            assert "\n" not in text and "X-API-Key" in json.loads(text)["detail"], text
            assert answered["Content-Type"] == "application/json" and "Bearer" in answered["WWW-Authenticate"]
            refusals += 1
    assert asyncio.run(raw(url, "GET", "/health"))[0] == 200
    log = log_until_marker(url, lines, start, {"X-API-Key": TOKEN_A})
    assert module_fake.requests_total == 0  # no grader call
    assert log.count(" request_unauthorized ") == refusals and " session_created " not in log
    # No session was made: the id is still free, and the token's owner can take it.
    headers = {"X-API-Key": TOKEN_A, "X-Session-ID": "session-of-nobody-0001"}
    assert asyncio.run(raw(url, "POST", "/create", headers=headers, json=bodies["/create"]))[0] == 200
    assert asyncio.run(raw(url, "POST", "/delete", headers=headers))[0] == 200


async def answers(url: str, token: str, replies: dict[int, str], bearer: bool = False) -> dict[int, dict[str, Any]]:
    """Each task index's reply sent through the terminal tool by the SDK's client with `api_key=token`: its reward
    and session id."""
    client = AsyncOpenReward(api_key=token)
    env = client.environments.get("healthbench", base_url=url)
    seen = {}
    try:
        for index, reply in replies.items():
            async with env.session(split="test", index=index, secrets=SECRETS) as session:
                output = await session.call_terminal_tool(reply)
                seen[index] = {"reward": output.reward, "sid": session.sid}
    finally:
        await client.environments.aclose()
    return seen


def test_the_sdk_client_with_the_token_gets_grades_rewards(
    server: tuple[str, list[str]], module_fake: FakeOpenAI, data: Path, tmp_path: Path
) -> None:
    url, lines = server
    start = len(lines)
    replies = {index: f"Rest and fluids ({index}); see a doctor if it gets worse." for index in range(len(ROWS))}
    seen = asyncio.run(answers(url, TOKEN_B, replies))
    log = log_until_marker(url, lines, start, {"Authorization": f"Bearer {TOKEN_A}"})
    assert module_fake.base_url
    graded = graded_by_cli(
        tmp_path, data, {ROWS[i]["prompt_id"]: reply for i, reply in replies.items()}, module_fake.base_url
    )
    assert {i: s["reward"] for i, s in seen.items()} == pytest.approx(
        {i: graded[ROWS[i]["prompt_id"]]["score"] for i in replies}, abs=1e-9
    )
    # A line per session created and per reward, naming the task; the session id only shortened.
    created = [line for line in log.splitlines() if " session_created " in line]
    rewarded = [line for line in log.splitlines() if " reward " in line]
    assert len(created) == len(rewarded) == len(ROWS)
    for index, row in enumerate(ROWS):
        sid = seen[index]["sid"]
        assert sid not in log and f"session_id={sid[:8]}…" in log
        [line] = [line for line in rewarded if re.search(f"task={row['prompt_id']}( |$)", line)]
        assert f"reward={round(seen[index]['reward'], 4)}" in line and "grader_s=" in line and "prompt_tokens=" in line
    assert all("caller='token 2'" in line and 'grader_key="the session\'s"' in line for line in created)


def test_a_session_is_used_only_with_the_token_that_created_it(
    server: tuple[str, list[str]], module_fake: FakeOpenAI
) -> None:
    url, lines = server

    async def run() -> dict[str, Any]:
        client = AsyncOpenReward(api_key=TOKEN_A)
        env = client.environments.get("healthbench", variant="healthbench_answer", base_url=url)
        seen: dict[str, Any] = {}
        try:
            async with env.session(split="test", index=0, secrets=SECRETS) as session:
                assert session.sid
                seen["sid"] = session.sid
                module_fake.reset()
                other = {"X-API-Key": TOKEN_B, "X-Session-ID": session.sid}
                group = {
                    "candidates": [{"messages": [{"role": "assistant", "blocks": [{"type": "text", "text": "x"}]}]}]
                }
                attempts = [
                    ("POST", "/healthbench_answer/score_group", group),
                    ("POST", "/healthbench_answer/call", {"name": "answer", "input": {"response": "Rest."}}),
                    ("GET", "/healthbench_answer/prompt", None),
                    ("GET", "/healthbench_answer/task_tools", None),
                    ("POST", "/ping", None),
                    ("POST", "/delete", None),
                    ("POST", "/create", {"split": "test", "index": 1}),
                ]
                seen["refused"] = [
                    (await raw(url, method, path, headers=other, json=body))[:2] for method, path, body in attempts
                ]
                seen["calls_before_owner"] = module_fake.requests_total
                seen["reward"] = (await session.call_tool("answer", {"response": "Rest and fluids."})).reward
        finally:
            await client.environments.aclose()
        return seen

    start = len(lines)
    seen = asyncio.run(run())
    log = log_until_marker(url, lines, start, {"X-API-Key": TOKEN_A})
    for status, text in seen["refused"]:
        assert status == 403 and "created with another token" in text and seen["sid"] not in text, text
    assert seen["calls_before_owner"] == 0  # not one grader call on the owner's key for the other token
    assert seen["reward"] is not None  # the owner's session was neither used nor deleted by them
    assert log.count(" session_refused ") == len(seen["refused"]) and seen["sid"] not in log


def test_the_start_line_counts_tokens_and_never_shows_them(server: tuple[str, list[str]]) -> None:
    _, lines = server
    [line] = [strip_colour(line) for line in lines if "healthbench_serving" in line]
    assert "tokens=2" in line and "'group_size': 64" in line and "'request_bytes': 8388608" in line


def serve_command(tmp_path: Path, *flags: str, **environ: str) -> subprocess.CompletedProcess[str]:
    unset = ("HEALTHBENCH_SERVER_TOKEN", "HEALTHBENCH_NO_AUTH")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in unset}
    env.update(HEALTHBENCH_DATA_DIR=str(tmp_path / "nothing"), OPENAI_BASE_URL=POLICY_BASE_URL, **environ)
    command = [sys.executable, "-m", "healthbench", "serve", "--subset", "full", "--port", "0", *flags]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("flags", "environ"),
    [
        (("--host", "0.0.0.0"), {"HEALTHBENCH_GRADER_API_KEY": KEY}),
        (("--host", "::"), {"OPENAI_API_KEY": KEY}),
        # A grader that needs no key is the server's to spend too.
        (("--host", "0.0.0.0", "--grader-base-url", "http://127.0.0.1:9/v1"), {}),
    ],
    ids=["key", "openai-key-ipv6", "keyless-grader"],
)  # fmt: skip
def test_beyond_loopback_a_server_that_grades_on_its_own_does_not_start_without_a_token(
    tmp_path: Path, flags: tuple[str, ...], environ: dict[str, str]
) -> None:
    done = serve_command(tmp_path, *flags, **environ)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    for way in ("--auth-token-file", "HEALTHBENCH_SERVER_TOKEN", "--host 127.0.0.1", "--no-auth"):
        assert way in line, line
    assert not (tmp_path / "nothing").exists()  # refused before anything was downloaded
    assert KEY not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("flags", "environ", "said"),
    [
        (("--no-auth",), {"HEALTHBENCH_SERVER_TOKEN": TOKEN_A}, "--no-auth and a token"),
        ((), {"HEALTHBENCH_NO_AUTH": "1", "HEALTHBENCH_SERVER_TOKEN": TOKEN_A}, "--no-auth and a token"),
        ((), {"HEALTHBENCH_SERVER_TOKEN": "short"}, "too easily guessed"),
        ((), {"HEALTHBENCH_SERVER_TOKEN": "has a space in it, long enough"}, "without spaces"),
    ],
)
def test_tokens_that_cannot_be_used_stop_the_server(
    tmp_path: Path, flags: tuple[str, ...], environ: dict[str, str], said: str
) -> None:
    done = serve_command(tmp_path, *flags, **environ)
    assert done.returncode != 0 and said in done.stderr and "Traceback" not in done.stderr
    assert TOKEN_A not in done.stderr and "short" not in done.stderr.replace("too easily", "")


def test_loopback_is_the_default_and_no_auth_is_said(data: Path, module_fake: FakeOpenAI) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(
        PYTHONUNBUFFERED="1", HEALTHBENCH_GRADER_BASE_URL=module_fake.base_url or "", HEALTHBENCH_GRADER_API_KEY=KEY
    )
    command = [sys.executable, "-m", "healthbench", "serve", "--data", str(data), "--port", "0"]
    with server_process(command, env) as (url, lines):
        assert url.startswith("http://127.0.0.1:")
    assert not any("healthbench_open" in line for line in lines)
    with server_process([*command, "--no-auth"], env) as (url, lines):
        pass
    [warning] = [strip_colour(line) for line in lines if "healthbench_open" in line]
    assert "--no-auth" in warning
