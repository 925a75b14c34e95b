"""The client tells what waiting cannot cure (a dead or unresolvable endpoint, a URL that is not one, a refusal of
the request itself) from what it can (timeouts, 5xx, 429), and raises `EndpointUnusable` for the first kind:
never retried past a couple of quick attempts, one line, the endpoint named and the key never."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_reqrep import ConnectionKey

from healthbench.api.client import ApiClient, RetryPolicy
from healthbench.api.failures import unreachable
from healthbench.errors import EndpointUnusable, ProviderError, RequestFailed
from healthbench.grading.grader import parse_verdict
from healthbench.testing import FakeOpenAI
from tests.reference import KEY
from tests.test_client import run

T = TypeVar("T")
FAST = RetryPolicy(max_attempts=12, initial_backoff=0.001, max_backoff=0.01)
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def dead_url() -> str:
    """A loopback URL nothing listens on: a port the system gave out and took back."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def attempts_of(client: ApiClient) -> list[int]:
    """Count the attempts the client makes (each goes through `_attempt`)."""
    made = [0]
    attempt = client._attempt

    async def counted(payload: bytes, cost: int) -> Any:
        made[0] += 1
        return await attempt(payload, cost)

    client._attempt = counted  # type: ignore[method-assign]
    return made


def test_a_dead_endpoint_is_unusable_after_three_quick_attempts() -> None:
    url = dead_url()
    client = ApiClient(url, KEY, retry=FAST)
    made = attempts_of(client)
    with pytest.raises(EndpointUnusable) as caught:
        run(client, lambda: client.complete(BODY, parse_verdict))
    assert made[0] == 3
    message = str(caught.value)
    assert message.startswith(f"endpoint {url} cannot be reached (connection refused at 127.0.0.1:")
    assert "\n" not in message and KEY not in message and not caught.value.refused


def test_an_endpoint_that_answered_gets_the_whole_table_before_it_is_unusable() -> None:
    with FakeOpenAI() as server:
        assert server.base_url
        client = ApiClient(server.base_url, retry=RetryPolicy(max_attempts=5, initial_backoff=0.001))

        async def answered_then_dead() -> None:
            await client.complete(BODY, lambda text: text)
            made = attempts_of(client)
            server.stop()  # the server goes away mid-run, as a restarting one does
            with pytest.raises(EndpointUnusable, match="cannot be reached"):
                await client.complete(BODY, lambda text: text)
            assert made[0] == 5

        run(client, answered_then_dead)


@pytest.mark.parametrize("url", ["notaurl", "ftp://127.0.0.1/v1", "http:///v1", "localhost:8000/v1"])
def test_a_url_that_is_not_one_is_unusable_at_once(url: str) -> None:
    client = ApiClient(url, KEY, retry=FAST)
    made = attempts_of(client)
    with pytest.raises(EndpointUnusable, match="is not a URL") as caught:
        run(client, lambda: client.complete(BODY, parse_verdict))
    assert made[0] == 1 and KEY not in str(caught.value)


def test_a_password_in_the_url_is_not_shown() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = ApiClient(f"http://user:hunter2@127.0.0.1:{port}/v1", retry=FAST)
    with pytest.raises(EndpointUnusable) as caught:
        run(client, lambda: client.complete(BODY, parse_verdict))
    assert "hunter2" not in str(caught.value) and f"http://127.0.0.1:{port}/v1" in str(caught.value)


def test_no_such_host_is_said_in_words_and_not_retried() -> None:
    key = ConnectionKey("nowhere.invalid", 443, True, True, None, None, None)
    dns = aiohttp.ClientConnectorDNSError(key, socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    assert unreachable(dns) == "no such host: nowhere.invalid"
    again = aiohttp.ClientConnectorError(key, socket.gaierror(socket.EAI_AGAIN, "Temporary failure"))
    assert unreachable(again) == "the name nowhere.invalid could not be resolved: Temporary failure"
    refused = aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "Connect call failed"))
    assert unreachable(refused) == "connection refused at nowhere.invalid:443"
    # A name that does not exist is given up at once; one not looked up just now gets the quick attempts.
    client = ApiClient("https://nowhere.invalid/v1")
    assert client._given_up(1, dns) and not client._given_up(1, again) and client._given_up(3, again)


def error(status: int, code: str | None = None, param: str | None = None, message: str = "no") -> ProviderError:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    return ProviderError.parse(status, json.dumps(body).encode())


def test_refusals_of_the_request_are_told_from_refusals_of_the_conversation() -> None:
    about_request = [
        error(401, "invalid_api_key"),
        error(403),
        error(404, "model_not_found"),
        error(400, "unsupported_value", "temperature"),
        error(400, "unsupported_parameter", "max_tokens"),
        error(400, None, "reasoning_effort"),
        error(422, "unsupported_value", "messages[0].role"),
    ]
    about_conversation = [
        error(400, "invalid_prompt"),
        error(400, "context_length_exceeded", "messages"),
        error(400, "string_above_max_length", "messages[1].content"),
        error(400, "content_filter", "prompt"),
        error(400, None, None, "This model's maximum context length is 4096 tokens."),  # vLLM names nothing
        error(413),
        error(429, "rate_limit_exceeded"),
        error(500),
    ]
    assert all(e.about_request for e in about_request)
    assert not any(e.about_request for e in about_conversation)


@asynccontextmanager
async def answering(status: int, body: Callable[[web.Request], str]) -> AsyncIterator[str]:
    """A loopback endpoint that answers every chat request with `status` and `body`."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body(request), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


def refused_with(status: int, body: Callable[[web.Request], str]) -> tuple[BaseException, int]:
    async def main() -> tuple[BaseException, int]:
        async with answering(status, body) as url:
            client = ApiClient(url, KEY, retry=FAST)
            made = attempts_of(client)
            try:
                await client.complete(BODY, parse_verdict)
            except (EndpointUnusable, RequestFailed) as exc:
                return exc, made[0]
            finally:
                await client.aclose()
        raise AssertionError("the request was not refused")

    return asyncio.run(main())


def openai_error(code: str | None, param: str | None, message: str) -> Callable[[web.Request], str]:
    return lambda _: json.dumps({"error": {"message": message, "type": "x", "param": param, "code": code}})


@pytest.mark.parametrize("status", [401, 403, 404])
def test_the_key_the_url_and_the_model_are_refused_at_once_and_an_echoed_key_is_redacted(status: int) -> None:
    caught, made = refused_with(status, lambda request: f"bad key {request.headers['Authorization']}")
    assert isinstance(caught, EndpointUnusable) and caught.refused and made == 1
    assert f"refused a request (HTTP {status}: bad key Bearer [redacted])" in str(caught)
    assert KEY not in str(caught)


def test_a_400_about_a_parameter_is_unusable_and_one_about_the_prompt_is_not() -> None:
    parameter = openai_error("unsupported_value", "temperature", "Unsupported value: 'temperature'\ndoes not.")
    caught, made = refused_with(400, parameter)
    assert isinstance(caught, EndpointUnusable) and made == 1
    assert "(HTTP 400 unsupported_value: Unsupported value: 'temperature' does not.)" in str(caught)
    prompt, made = refused_with(400, openai_error("invalid_prompt", None, "flagged"))
    assert isinstance(prompt, RequestFailed) and prompt.status == 400 and made == 1


def test_a_halted_client_sends_nothing_more_and_what_was_out_lands() -> None:
    with FakeOpenAI(latency=0.3) as server:
        assert server.base_url
        client = ApiClient(server.base_url, concurrency=4, retry=FAST)
        landed: list[str] = []

        async def one(i: int) -> None:
            body = {"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]}
            text, _ = await client.complete(body, lambda text: text)
            landed.append(text)  # what a caller stores on return

        async def work() -> None:
            await client.complete(BODY, lambda text: text)  # the first answer opens the gate to the rest
            tasks = [asyncio.ensure_future(one(i)) for i in range(12)]
            while server.requests_total < 5:  # the first, then the budget's four on the wire
                await asyncio.sleep(0.01)
            client.halt()
            await client.landed()
            assert len(landed) == 4  # each call on the wire returned, and its caller went on
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        run(client, work)
        assert server.requests_total == 5  # the other eight were never sent
