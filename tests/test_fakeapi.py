"""Tests of the fake OpenAI server, through a real aiohttp client over loopback."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import healthbench
from healthbench.testing import FAULT_KINDS, FakeOpenAI, policy_reply, prompt_verdict, verdict_reply

Reply = tuple[int, dict[str, str], bytes]


def grader_prompt(i: int) -> str:
    return f"# Conversation\nuser: question {i}\n\n# Rubric item\n[5] Mentions item {i}\n\n# Instructions\n..."


def chat(content: str, model: str = "gpt-test", system: str | None = None) -> dict[str, Any]:
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return {"model": model, "messages": messages}


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> Reply:
    async with session.post(url, json=body, headers={"Authorization": "Bearer sk-test"}) as resp:
        return resp.status, dict(resp.headers), await resp.read()


def post_all(url: str, bodies: list[dict[str, Any]], concurrent: bool = False) -> list[Reply]:
    """POST every body, one after another (so arrival order is fixed) or all at once."""

    async def run() -> list[Reply]:
        async with aiohttp.ClientSession() as session:
            if concurrent:
                return list(await asyncio.gather(*(post(session, url, b) for b in bodies)))
            return [await post(session, url, b) for b in bodies]

    return asyncio.run(run())


def content_of(raw: bytes) -> Any:
    return json.loads(raw)["choices"][0]["message"]["content"]


def fenced_json(content: str) -> Any:
    assert content.startswith("```json\n") and content.endswith("\n```")
    return json.loads(content.removeprefix("```json\n").removesuffix("\n```"))


def test_policy_reply_on_both_routes() -> None:
    body = chat("What helps a headache?", system="Be brief.")
    with FakeOpenAI() as server:
        assert server.base_url is not None
        root = server.base_url.removesuffix("/v1")
        replies = post_all(server.base_url + "/chat/completions", [body])
        replies += post_all(root + "/chat/completions", [body])
        assert server.requests_total == 2
        assert server.responses_by_kind == {"ok": 2}
        assert server.bodies == [body, body]
        assert server.auth_headers == ["Bearer sk-test", "Bearer sk-test"]
    for status, headers, raw in replies:
        assert status == 200
        assert headers["Content-Type"].startswith("application/json")
        payload = json.loads(raw)
        assert payload["object"] == "chat.completion"
        assert payload["model"] == "gpt-test"
        assert isinstance(payload["created"], int)
        choice = payload["choices"][0]
        assert choice["finish_reason"] == "stop"
        assert choice["message"] == {"role": "assistant", "content": policy_reply(body["messages"])}
        usage = payload["usage"]
        prompt_chars = len("What helps a headache?") + len("Be brief.")
        assert usage["prompt_tokens"] == prompt_chars // 4 + 1
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
        assert usage["completion_tokens_details"] == {"reasoning_tokens": 0}
    assert policy_reply(body["messages"]) != policy_reply(chat("Something else")["messages"])


def test_grader_verdict_is_a_function_of_the_prompt_text() -> None:
    prompts = [grader_prompt(i) for i in range(40)]
    with FakeOpenAI() as server:
        assert server.base_url is not None
        url = server.base_url + "/chat/completions"
        first = post_all(url, [chat(p) for p in prompts])
        # Same last message, different model and earlier messages: the verdict must not move.
        again = post_all(url, [chat(p, model="other", system="You are a grader.") for p in prompts])
    verdicts = [fenced_json(content_of(raw)) for _, _, raw in first]
    assert [v["criteria_met"] for v in verdicts] == [prompt_verdict(p) for p in prompts]
    assert {v["criteria_met"] for v in verdicts} == {True, False}
    assert all(v["explanation"] == "fake verdict" for v in verdicts)
    assert [content_of(raw) for _, _, raw in again] == [content_of(raw) for _, _, raw in first]
    assert content_of(first[0][2]) == verdict_reply(prompt_verdict(prompts[0]))


def test_respond_hook_overrides_or_falls_back() -> None:
    def respond(body: dict[str, Any]) -> str | None:
        return "scripted" if body["model"] == "scripted-model" else None

    with FakeOpenAI(respond=respond) as server:
        assert server.base_url is not None
        replies = post_all(server.base_url + "/chat/completions", [chat("hi", model="scripted-model"), chat("hi")])
    assert content_of(replies[0][2]) == "scripted"
    assert content_of(replies[1][2]) == policy_reply(chat("hi")["messages"])


def test_fail_always_items_get_prose() -> None:
    def never_gradable(body: dict[str, Any]) -> bool:
        return "item 3" in body["messages"][-1]["content"]

    with FakeOpenAI(fail_always=never_gradable) as server:
        assert server.base_url is not None
        replies = post_all(server.base_url + "/chat/completions", [chat(grader_prompt(i)) for i in range(6)] * 2)
        assert server.responses_by_kind == {"ok": 10, "fail_always": 2}
    for i, (status, _, raw) in enumerate(replies):
        assert status == 200
        content = content_of(raw)
        if i % 6 == 3:
            with pytest.raises(json.JSONDecodeError):
                json.loads(content)
        else:
            assert isinstance(fenced_json(content)["criteria_met"], bool)


def classify(attempt: Reply | None) -> str:
    """Name the kind of answer as a client sees it; None stands for a dropped connection."""
    if attempt is None:
        return "drop"
    status, headers, raw = attempt
    if status != 200:
        if status == 429:
            assert headers["Retry-After"] == "0"
        return str(status)
    try:
        content = content_of(raw)
    except json.JSONDecodeError:
        return "badjson"
    if content is None or content == "":
        return "null" if content is None else "empty"
    if not content.startswith("```json"):
        return "prose"
    criteria_met = fenced_json(content)["criteria_met"]
    return "ok" if isinstance(criteria_met, bool) else "string_verdict"


def observed_kinds(seed: int, n: int) -> tuple[list[str], dict[str, int]]:
    async def run(url: str) -> list[str]:
        kinds = []
        async with aiohttp.ClientSession() as session:
            for i in range(n):
                try:
                    attempt: Reply | None = await post(session, url, chat(grader_prompt(i)))
                except aiohttp.ClientConnectionError:
                    attempt = None
                kinds.append(classify(attempt))
        return kinds

    with FakeOpenAI(fault_rate=0.3, faults=FAULT_KINDS, seed=seed) as server:
        assert server.base_url is not None
        kinds = asyncio.run(run(server.base_url + "/chat/completions"))
        return kinds, dict(server.responses_by_kind)


def test_faults_follow_the_rate_and_the_seed() -> None:
    n = 600
    kinds, by_kind = observed_kinds(seed=7, n=n)
    counts = {kind: kinds.count(kind) for kind in set(kinds)}
    # The server's own tally agrees with what the client saw, kind for kind.
    assert counts == by_kind
    assert set(counts) == {"ok", *FAULT_KINDS}
    assert 0.2 < (n - counts["ok"]) / n < 0.4
    assert observed_kinds(seed=7, n=n)[0] == kinds
    assert observed_kinds(seed=8, n=n)[0] != kinds


def test_reset_replays_the_fault_sequence() -> None:
    with FakeOpenAI(fault_rate=0.5, faults=["500", "503"], seed=1) as server:
        assert server.base_url is not None
        url = server.base_url + "/chat/completions"
        first = [status for status, _, _ in post_all(url, [chat("x")] * 30)]
        server.reset()
        assert server.requests_total == 0 and server.bodies == [] and server.auth_headers == []
        assert server.responses_by_kind == {} and server.max_in_flight == 0
        second = [status for status, _, _ in post_all(url, [chat("x")] * 30)]
    assert first == second
    assert set(first) == {200, 500, 503}


def test_drop_is_a_client_side_connection_error() -> None:
    async def run(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                with pytest.raises(aiohttp.ClientConnectionError):
                    await post(session, url, chat("hello"))

    with FakeOpenAI(fault_rate=1.0, faults=["drop"]) as server:
        assert server.base_url is not None
        asyncio.run(run(server.base_url + "/chat/completions"))
        assert server.responses_by_kind == {"drop": 2}
        assert server.bodies == [chat("hello")] * 2


def test_rate_limit_answers_429_with_retry_after() -> None:
    with FakeOpenAI(rate_limit=2) as server:
        assert server.base_url is not None
        replies = post_all(server.base_url + "/chat/completions", [chat(str(i)) for i in range(10)], True)
        by_kind = dict(server.responses_by_kind)
    limited = [headers for status, headers, _ in replies if status == 429]
    # The bucket starts full (two requests' worth); ten at once cannot all fit.
    assert len(limited) == by_kind["rate_limited"] >= 1
    assert by_kind["ok"] + by_kind["rate_limited"] == 10 and by_kind["ok"] >= 2
    for headers in limited:
        assert float(headers["Retry-After"]) > 0
        assert headers["x-ratelimit-limit-requests"] == "120"  # per minute, as OpenAI reports it
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert headers["x-ratelimit-reset-requests"].endswith("ms")
    for status, headers, _ in replies:
        assert "x-ratelimit-remaining-requests" in headers, status


def test_max_in_flight_reflects_concurrency() -> None:
    bodies = [chat(str(i)) for i in range(8)]
    # The latency only holds requests open long enough to overlap; nothing measures time.
    with FakeOpenAI(latency=0.5) as server:
        assert server.base_url is not None
        url = server.base_url + "/chat/completions"
        assert all(status == 200 for status, _, _ in post_all(url, bodies, concurrent=True))
        assert server.max_in_flight == 8
    with FakeOpenAI() as server:
        assert server.base_url is not None
        post_all(server.base_url + "/chat/completions", bodies)
        assert server.max_in_flight == 1


def test_malformed_requests_get_400() -> None:
    async def run(url: str) -> list[int]:
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=b"{not json") as resp:
                statuses = [resp.status]
            statuses.append((await post(session, url, {"model": "m", "messages": []}))[0])
            return statuses

    with FakeOpenAI() as server:
        assert server.base_url is not None
        assert asyncio.run(run(server.base_url + "/chat/completions")) == [400, 400]
        assert server.responses_by_kind == {"bad_request": 2}
        assert server.bodies == [{"model": "m", "messages": []}]


def test_invalid_configuration_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown faults"):
        FakeOpenAI(faults=["418"])
    with pytest.raises(ValueError, match="fault kind"):
        FakeOpenAI(fault_rate=0.1)


def test_main_serves_in_the_foreground() -> None:
    src = str(Path(healthbench.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = ["--port", "0", "--fault-rate", "1", "--faults", "500", "--rate-limit", "100", "--lenient-params"]
    with subprocess.Popen(
        [sys.executable, "-m", "healthbench.testing", *args], stdout=subprocess.PIPE, text=True, env=env
    ) as proc:
        try:
            assert proc.stdout is not None
            base_url = proc.stdout.readline().strip()
            assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
            # A 500, not the 400 strict parameter rules would answer first.
            [(status, headers, _)] = post_all(base_url + "/chat/completions", [{**chat("hi", "o3"), "temperature": 0}])
            assert status == 500
            assert headers["x-ratelimit-limit-requests"] == "6000"  # per minute
        finally:
            proc.terminate()
            proc.wait(timeout=10)
