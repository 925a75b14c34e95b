"""The client tells what waiting cannot cure (a dead or unresolvable endpoint, a URL that is not one, a refusal of
the request itself, an endpoint none of whose first answers can be used) from what it can (timeouts, 5xx, 429 once
the endpoint has answered), and raises `EndpointUnusable` for the first kind: never retried past a few quick
attempts, one line, the endpoint named and what it returned, and the key never."""

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

from healthbench.api.client import ApiClient, Retries
from healthbench.api.failures import ProviderError, transport_failure, unreachable
from healthbench.api.retrying import FIRST_FAILURES, Health, Kind
from healthbench.api.routing import Server
from healthbench.errors import EndpointUnusable, RequestFailed
from healthbench.grading.verdict import parse_verdict
from healthbench.testing import Canned, FakeOpenAI
from tests.endpoints import loopback
from tests.reference import KEY
from tests.test_client import run

T = TypeVar("T")
FAST = Retries(max_attempts=12, initial_backoff=0.001, max_backoff=0.01)
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

    async def counted(server: Server, payload: bytes, cost: int, alone: bool) -> Any:
        made[0] += 1
        return await attempt(server, payload, cost, alone)

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
        client = ApiClient(server.base_url, retry=Retries(max_attempts=5, initial_backoff=0.001))

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
    gone, later = (transport_failure(exc, 120, 10, "https://nowhere.invalid/v1") for exc in (dns, again))
    assert gone.kind is Kind.NO_SUCH_HOST and not gone.retried and gone.rule.unusable
    health = Health()
    assert [health.unproven_failure(later, attempt, 12) for attempt in (1, 2, 3)] == [False, False, True]


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

    async with loopback("/v1/chat/completions", handler) as url:
        yield f"{url}/v1"


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


def test_a_refusal_with_an_empty_body_says_so_once() -> None:
    caught, made = refused_with(401, lambda _: "")
    assert isinstance(caught, EndpointUnusable) and made == 1
    assert "refused a request (HTTP 401 with an empty body)" in str(caught)
    assert "HTTP 401: HTTP 401" not in str(caught)


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
            # The first, then more as the answers come (no limit is known: a slow start), up to the budget's four.
            while server.requests_total < 5:
                await asyncio.sleep(0.01)
            client.halt()
            await client.landed()
            # Each call on the wire returned, and its caller went on: none is left halfway.
            assert len(landed) == server.requests_total - 1
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        run(client, work)
        assert len(landed) == server.requests_total - 1 <= 8  # nothing sent once halted: the others never were


# Answers no OpenAI-compatible endpoint gives: what a wrong URL, a proxy's page or a broken server answers.
GARBAGE = {
    "html": Canned(200, "<html><body><h1>Welcome to nginx!</h1>\n" + "<p>It works.</p>" * 20 + "<p>Past 200.</p>"),
    "not json": Canned(200, "not json at all"),
    "{}": Canned(200, "{}"),
    "500": Canned(500, '{"error": {"message": "upstream failed", "type": "server_error"}}'),
}


@pytest.mark.parametrize("name", list(GARBAGE))
def test_an_endpoint_none_of_whose_first_answers_can_be_used_is_unusable_after_three_attempts(name: str) -> None:
    canned = GARBAGE[name]
    with FakeOpenAI(canned=canned) as server:
        url = server.base_url or ""
        client = ApiClient(url, KEY, retry=FAST)
        made = attempts_of(client)
        with pytest.raises(EndpointUnusable) as caught:
            run(client, lambda: client.complete(BODY, parse_verdict))
        assert made[0] == server.requests_total == 3
    message = str(caught.value)
    assert message.startswith(f"endpoint {url} gave no usable answer to its first 3 requests (the last: HTTP ")
    # What it returned, its first 200 characters on one line, and nothing past them; no Python class names.
    assert " ".join(canned.body[:200].split()) in message and "Past 200" not in message
    assert "\n" not in message and "Error" not in message.replace("server_error", "")


def test_many_calls_to_an_unusable_endpoint_end_in_one_verdict_after_a_bounded_number_of_requests() -> None:
    with FakeOpenAI(canned=GARBAGE["html"]) as server:
        url = server.base_url or ""
        client = ApiClient(url, KEY, concurrency=16, retry=FAST)
        bodies = [{"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]} for i in range(200)]

        async def work() -> list[Any]:
            return await asyncio.gather(*(client.complete(b, parse_verdict) for b in bodies), return_exceptions=True)

        failures = run(client, work)
        # The verdict came at the FIRST_FAILURES-th failed attempt at the latest; after it, only what was already in
        # flight (at most the budget) had been sent, and nothing more was.
        assert server.requests_total <= FIRST_FAILURES + 16
    assert all(isinstance(failure, EndpointUnusable) for failure in failures)
    assert len({str(failure) for failure in failures}) == 1


def test_an_endpoint_that_never_answers_is_unusable_after_three_timeouts_and_says_so() -> None:
    with FakeOpenAI(canned=Canned(status=None)) as server:
        url = server.base_url or ""
        client = ApiClient(url, KEY, timeout=1.0, retry=FAST)
        made = attempts_of(client)
        with pytest.raises(EndpointUnusable) as caught:
            run(client, lambda: client.complete(BODY, parse_verdict))
    assert made[0] == 3
    said = f"endpoint {url} gave no usable answer to its first 3 requests (the last: no answer within 1 s)"
    assert str(caught.value) == said


def test_a_hang_once_the_endpoint_has_answered_fails_the_call_with_the_timeout_and_the_url() -> None:
    with FakeOpenAI() as server:
        url = server.base_url or ""
        client = ApiClient(url, KEY, timeout=1.0, retry=Retries(max_attempts=3, initial_backoff=0.001))

        async def answered_then_hung() -> None:
            await client.complete(BODY, lambda text: text)
            server.canned = Canned(status=None)
            with pytest.raises(RequestFailed) as caught:
                await client.complete(BODY, lambda text: text)
            assert str(caught.value) == f"no answer within 1 s from {url} (after 3 attempts)"

        run(client, answered_then_hung)


def test_garbage_once_the_endpoint_has_answered_gets_the_whole_table() -> None:
    with FakeOpenAI() as server:
        client = ApiClient(server.base_url or "", KEY, retry=Retries(max_attempts=5, initial_backoff=0.001))

        async def answered_then_garbage() -> None:
            await client.complete(BODY, lambda text: text)
            server.canned = GARBAGE["500"]
            made = attempts_of(client)
            with pytest.raises(RequestFailed, match=r"HTTP 500: .*upstream failed.*\(after 5 attempts\)"):
                await client.complete(BODY, lambda text: text)
            assert made[0] == 5

        run(client, answered_then_garbage)


def test_an_answer_with_no_content_is_the_models_doing_and_not_an_unusable_endpoint() -> None:
    with FakeOpenAI(canned=Canned(200, '{"choices": [{"message": {"content": null}}]}')) as server:
        client = ApiClient(server.base_url or "", KEY, retry=Retries(max_attempts=4, initial_backoff=0.001))
        with pytest.raises(RequestFailed, match="no content in the message"):
            run(client, lambda: client.complete(BODY, parse_verdict))
        assert server.requests_total == 4


def test_an_unusable_endpoint_fails_the_calls_after_it_without_sending() -> None:
    client = ApiClient(dead_url(), KEY, retry=FAST)
    made = attempts_of(client)

    async def twice() -> None:
        for _ in range(2):
            with pytest.raises(EndpointUnusable, match="cannot be reached"):
                await client.complete(BODY, parse_verdict)

    run(client, twice)
    assert made[0] == 3  # the second call sent nothing
