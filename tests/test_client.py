"""The client seam against a real loopback server: retries, the bound, the budget, usage, the key."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from healthbench.api.client import ApiClient, Retries
from healthbench.api.ratesignals import duration_seconds, retry_after_seconds
from healthbench.errors import EndpointUnusable, InvalidResponse, RequestFailed
from healthbench.grading.grader import Grader
from healthbench.grading.verdict import parse_verdict
from healthbench.testing import FakeOpenAI, prompt_verdict

T = TypeVar("T")
FAST = Retries(max_attempts=12, initial_backoff=0.001, max_backoff=0.01)


def run(client: ApiClient, work: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        try:
            return await work()
        finally:
            await client.aclose()

    return asyncio.run(main())


def grader_prompt_body(i: int) -> dict[str, Any]:
    return Grader(ApiClient()).request_body(f"# Conversation\nuser: q{i}\n\n# Rubric item\n[1] item {i}")


def test_every_fault_kind_is_retried_to_the_same_verdicts() -> None:
    faults = ("429", "500", "503", "drop", "badjson", "prose", "null", "empty", "string_verdict")
    with FakeOpenAI(fault_rate=0.25, faults=faults, seed=3) as server:
        assert server.base_url
        client = ApiClient(server.base_url, "sk-test", concurrency=8, retry=FAST)
        bodies = [grader_prompt_body(i) for i in range(200)]

        async def work() -> list[tuple[Any, Any]]:
            return await asyncio.gather(*(client.complete(b, parse_verdict) for b in bodies))

        results = run(client, work)
        assert set(server.responses_by_kind) >= set(faults)
        assert server.responses_by_kind["ok"] == 200
    for body, (verdict, usage) in zip(bodies, results, strict=True):
        assert verdict.criteria_met is prompt_verdict(body["messages"][-1]["content"])
        assert usage.calls >= 1 and usage.prompt_tokens > 0
    assert sum(u.calls for _, u in results) > 200  # answered bad verdicts are billed, and counted


def test_the_bound_raises_with_the_last_cause() -> None:
    with FakeOpenAI(fail_always=lambda body: True) as server:
        assert server.base_url
        client = ApiClient(server.base_url, concurrency=2, retry=Retries(max_attempts=3, initial_backoff=0.001))
        with pytest.raises(RequestFailed) as caught:
            run(client, lambda: client.complete(grader_prompt_body(0), parse_verdict))
        assert server.requests_total == 3
    assert caught.value.attempts == 3
    assert "not JSON" in str(caught.value) and "after 3 attempts" in str(caught.value)


def test_client_errors_are_not_retried() -> None:
    with FakeOpenAI() as server:
        assert server.base_url
        client = ApiClient(server.base_url, retry=FAST)
        with pytest.raises(RequestFailed, match="HTTP 400") as caught:
            run(client, lambda: client.complete({"model": "m", "messages": "nope"}, parse_verdict))
        assert server.requests_total == 1
    assert caught.value.attempts == 1


def test_connection_refused_is_retried_then_the_endpoint_is_unusable() -> None:
    # More in test_unusable_endpoints: an endpoint that never answered gets a few quick attempts, not the table.
    client = ApiClient("http://127.0.0.1:9/v1", retry=Retries(max_attempts=2, initial_backoff=0.001))
    with pytest.raises(EndpointUnusable, match="cannot be reached"):
        run(client, lambda: client.complete(grader_prompt_body(0), parse_verdict))


def test_concurrency_budget_is_shared_by_all_callers() -> None:
    with FakeOpenAI(latency=0.05) as server:
        assert server.base_url
        client = ApiClient(server.base_url, concurrency=5, retry=FAST)

        async def work() -> None:
            await asyncio.gather(*(client.complete(grader_prompt_body(i), parse_verdict) for i in range(40)))

        run(client, work)
        assert server.max_in_flight == 5
        assert server.requests_total == 40


def test_key_goes_only_in_the_authorization_header() -> None:
    with FakeOpenAI() as server:
        assert server.base_url
        client = ApiClient(server.base_url, "sk-secret-123", retry=FAST)
        assert "sk-secret-123" not in repr(client)
        run(client, lambda: client.complete(grader_prompt_body(0), parse_verdict))
        assert server.auth_headers == ["Bearer sk-secret-123"]
        anonymous = ApiClient(server.base_url, None, retry=FAST)
        run(anonymous, lambda: anonymous.complete(grader_prompt_body(0), parse_verdict))
        assert server.auth_headers[-1] is None


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after": "1.5"}) == 1.5
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    http_date = retry_after_seconds({"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"})
    assert http_date is not None and http_date > 0
    policy = Retries(initial_backoff=1.0, max_backoff=8.0)
    assert policy.backoff(1, 3.0) == 3.0
    assert 0.75 <= policy.backoff(1, None) <= 1.0
    assert 6.0 <= policy.backoff(10, None) <= 8.0
    assert policy.backoff(1, 10_000.0) <= 1.0  # an absurd Retry-After falls back to backoff


def test_rate_limit_durations() -> None:
    assert duration_seconds("6m0s") == 360.0
    assert duration_seconds("500ms") == 0.5
    assert duration_seconds("1.5") == 1.5
    assert duration_seconds("later") is None


def test_invalid_response_is_the_parse_contract() -> None:
    with pytest.raises(InvalidResponse):
        parse_verdict("")
