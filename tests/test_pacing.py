"""The pacing model against the fake's limiter on a simulated clock: whole runs in milliseconds, no sleeps."""

from __future__ import annotations

import asyncio
import heapq
import json
import random
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from healthbench.api.client import ApiClient, describe_pace
from healthbench.api.pacing import BURST, Gate, Pace, Pacer
from healthbench.api.ratesignals import read_refusal, request_cost
from healthbench.errors import QuotaExhausted
from healthbench.testing import FakeOpenAI
from healthbench.testing.limits import Limiter, RateLimits

# About a HealthBench grader call: 1,300 prompt tokens and max_tokens 2048, so about 3,350 tokens of TPM.
GRADER_BODY: dict[str, Any] = {
    "model": "gpt-test",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "x" * 5200},
    ],
    "max_tokens": 2048,
}
COST = request_cost(GRADER_BODY)
RATE = 100.0  # requests a second, or the same in tokens


@dataclass
class Run:
    answered: int
    refused: int
    seconds: float
    paces: list[Pace]

    @property
    def share_refused(self) -> float:
        return self.refused / (self.answered + self.refused)


def simulate(
    pacer: Pacer, limits: RateLimits, *, calls: int = 2000, concurrency: int = 64, kind: type[Limiter] = Limiter
) -> Run:
    """`calls` grader calls through `pacer` into the fake's limiter; 300 +/- 100 ms latency, 429s at once."""
    limiter = kind(limits, now=0.0)
    rng = random.Random(7)
    now, pending, answered, refused = 0.0, calls, 0, 0
    in_flight: list[tuple[float, int, int, bytes | None, dict[str, str]]] = []  # (done, seq, ticket, 429, headers)
    paces: list[Pace] = []
    seq = 0
    while pending or in_flight:
        wake = float("inf")
        while pending and len(in_flight) < concurrency:
            delay = pacer.delay(now, COST)
            if delay > 0:
                wake = now + delay
                break
            ticket = pacer.start(now, COST)
            pending -= 1
            response, headers = limiter.admit(GRADER_BODY, now)
            seq += 1
            if response is None:
                heapq.heappush(in_flight, (now + rng.uniform(0.2, 0.4), seq, ticket, None, headers))
            else:
                assert isinstance(response.body, bytes)
                heapq.heappush(in_flight, (now + 0.001, seq, ticket, response.body, dict(response.headers)))
        now = min(wake, in_flight[0][0]) if in_flight else wake
        while in_flight and in_flight[0][0] <= now:
            _, _, ticket, refusal, headers = heapq.heappop(in_flight)
            if refusal is None:
                answered += 1
                pacer.on_answer(now, ticket, headers)
            else:
                refused += 1
                pending += 1  # retried through the same pacing
                pacer.on_refused(now, ticket, COST, read_refusal(refusal, headers), headers)
        if answered % 100 == 0:
            paces.append(pacer.status(now))
    return Run(answered, refused, now, paces)


LIMITERS = {
    "RPM, refused not counted, no headers": RateLimits(rpm=RATE * 60, count_refused=False, headers=False),
    "RPM, refused counted, no headers": RateLimits(rpm=RATE * 60, headers=False),
    "RPM, refused counted, headers": RateLimits(rpm=RATE * 60),
    "TPM, refused counted, no headers": RateLimits(tpm=RATE * 60 * COST, headers=False),
    "TPM, refused counted, headers": RateLimits(tpm=RATE * 60 * COST),
}


@pytest.mark.parametrize("kind", list(LIMITERS))
def test_a_run_sits_at_the_limit_with_few_refusals(kind: str) -> None:
    limits = LIMITERS[kind]
    run = simulate(Pacer(), limits)
    share = run.answered / run.seconds / RATE
    # The bar: 90% and under 1% refused with headers, 85% and under 5% without.
    assert share >= (0.9 if limits.headers else 0.85), (kind, share)
    assert run.share_refused < (0.01 if limits.headers else 0.05), (kind, run.refused)
    binding = "RPM" if limits.rpm else "TPM"
    assert run.paces[-1].binding == binding and run.paces[-1].rate == pytest.approx(RATE, rel=0.15)


class MinuteReports(Limiter):
    """Reports what remains of the minute while it enforces a one-second window: the mirror overstates."""

    def admit(self, body: dict[str, Any], now: float) -> tuple[Any, dict[str, str]]:
        response, headers = super().admit(body, now)
        if response is not None:
            return response, headers
        remaining = int(headers["x-ratelimit-remaining-requests"])
        return None, headers | {"x-ratelimit-remaining-requests": str(remaining * 60)}


def test_a_budget_reported_otherwise_than_enforced_is_trusted_until_its_first_refusal() -> None:
    run = simulate(Pacer(), RateLimits(rpm=RATE * 60), kind=MinuteReports)
    assert run.answered / run.seconds / RATE >= 0.9
    assert 1 <= run.refused <= 64  # one burst, as far as the concurrency reaches; then the pace alone


def test_with_neither_headers_nor_numbers_the_pace_is_found_from_the_429s() -> None:
    run = simulate(Pacer(), RateLimits(rpm=RATE * 60, headers=False, numbers=False))
    assert run.answered / run.seconds / RATE >= 0.85
    assert run.share_refused < 0.05
    assert run.paces[-1].binding == "429"


def test_the_user_limits_come_first_and_pace_from_the_first_request() -> None:
    pacer = Pacer(rpm=600)  # ten a second; the server would take a hundred
    starts = []
    now = 0.0
    for _ in range(30):
        now += max(0.0, pacer.delay(now, COST))
        starts.append(now)
        ticket = pacer.start(now, COST)
        pacer.on_answer(now, ticket, {"x-ratelimit-limit-requests": "6000"})
    assert pacer.limits == (600, None)
    # No probe with limits given; the catch-up allowance (0.05 s) lets the second go with the first, then ten a second.
    assert starts[1] == starts[0] == 0.0
    assert starts[29] == pytest.approx(2.8, abs=1e-9)


def test_until_the_first_answer_only_one_request_is_out() -> None:
    pacer = Pacer()
    assert pacer.delay(0.0, COST) <= 0
    ticket = pacer.start(0.0, COST)
    assert pacer.delay(0.01, COST) > 0
    pacer.on_answer(0.3, ticket, {})
    assert pacer.delay(0.3, COST) <= 0 and pacer.status(0.3).binding is None


def test_a_429_holds_every_new_start_until_its_retry_time() -> None:
    pacer = Pacer(rpm=60_000, tpm=10**9)
    ticket = pacer.start(0.0, COST)
    message = (
        "Rate limit reached for gpt-4.1 in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, "
        "Requested 3358. Please try again in 4.7s. Visit https://platform.openai.com/account/rate-limits to learn more."
    )
    refusal = read_refusal(json.dumps({"error": {"message": message, "code": "rate_limit_exceeded"}}).encode(), {})
    assert (refusal.dimension, refusal.limit, refusal.requested, refusal.retry_after) == ("tokens", 30000, 3358, 4.7)
    pacer.on_refused(1.0, ticket, COST, refusal, {})
    assert pacer.delay(1.0, 1) == pytest.approx(4.7)
    assert pacer.limits == (60_000, 10**9)  # the user's limit stands over the message's
    assert str(pacer.status(1.0)) == "1 req/s, 429-bound"


def test_a_reported_empty_budget_is_waited_out_before_the_next_start() -> None:
    pacer = Pacer()
    ticket = pacer.start(0.0, COST)
    headers = {"x-ratelimit-limit-tokens": "60000", "x-ratelimit-remaining-tokens": "100"}
    pacer.on_answer(0.3, ticket, headers)
    # A thousand tokens a second refill the 100 left (as of the answer: when the server counted is not known) up
    # to this one's cost and a margin of the catch-up allowance's refill.
    assert pacer.delay(0.3, COST) == pytest.approx((COST + 1000 * BURST - 100) / 1000, rel=1e-6)


def test_insufficient_quota_stops_every_start_at_once() -> None:
    pacer = Pacer()
    ticket = pacer.start(0.0, COST)
    body = json.dumps({"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}})
    refusal = read_refusal(body.encode(), {"retry-after": "1"})
    assert refusal.quota
    pacer.on_refused(0.1, ticket, COST, refusal, {})
    with pytest.raises(QuotaExhausted):
        pacer.delay(0.2, COST)


def test_the_gate_raises_for_quota_to_the_request_and_every_later_one() -> None:
    async def run() -> None:
        gate = Gate(Pacer(rpm=6000))
        ticket = await gate.start(COST)
        body = json.dumps({"error": {"message": "no", "code": "insufficient_quota"}}).encode()
        with pytest.raises(QuotaExhausted):
            gate.refused(ticket, COST, body, {})
        with pytest.raises(QuotaExhausted):
            await gate.start(COST)

    asyncio.run(run())


def test_a_request_costs_its_prompt_and_its_cap() -> None:
    assert COST == 1300 + 7 + 2 * 4 + 2048
    assert request_cost({"input": "abcd", "max_output_tokens": 10}) == 1 + 4 + 10
    assert request_cost({"messages": [{"role": "user", "content": "abcd"}]}, default_cap=100) == 1 + 4 + 100


def _complete_all(client: ApiClient, bodies: list[dict[str, Any]]) -> list[str | BaseException]:
    async def one(body: dict[str, Any]) -> str | BaseException:
        try:
            reply, _ = await client.complete(body, str)
        except Exception as exc:
            return exc
        return reply

    async def main() -> list[str | BaseException]:
        try:
            return list(await asyncio.gather(*(one(body) for body in bodies)))
        finally:
            await client.aclose()

    return asyncio.run(main())


def _chat(i: int) -> dict[str, Any]:
    return {"model": "gpt-test", "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 10}


def test_the_client_learns_the_limit_from_the_first_429_and_keeps_under_it() -> None:
    # A hundred requests a second, ten at once, no headers: only the 429's message says what the limit is.
    limits = RateLimits(rpm=6000, window=0.1, headers=False)
    with FakeOpenAI(limits=limits) as server:
        assert server.base_url
        client = ApiClient(server.base_url, "sk-learn", concurrency=32)
        replies = _complete_all(client, [_chat(i) for i in range(200)])
        counts = dict(server.responses_by_kind)
    assert all(isinstance(reply, str) for reply in replies)
    assert client.gate.pacer.limits == (6000, None)
    # At most the one burst sent before anything was known; a client that kept sending into the limit would
    # be refused for most of two seconds of requests.
    assert counts["ok"] == 200 and counts.get("rate_limited", 0) <= 32


def test_the_client_stops_at_once_when_the_quota_runs_out() -> None:
    with FakeOpenAI(limits=RateLimits(quota=3)) as server:
        assert server.base_url
        client = ApiClient(server.base_url, "sk-quota", concurrency=1)
        replies = _complete_all(client, [_chat(i) for i in range(6)])
        counts = dict(server.responses_by_kind)
    assert [isinstance(reply, str) for reply in replies] == [True] * 3 + [False] * 3
    assert all(isinstance(reply, QuotaExhausted) and "no quota left" in str(reply) for reply in replies[3:])
    assert counts == {"ok": 3, "quota_exhausted": 1}  # never retried, and nothing sent after it


def test_the_progress_line_shows_each_gate_once_under_the_names_that_share_it() -> None:
    policy = ApiClient("http://127.0.0.1:9/v1", "sk-shared")
    grader = ApiClient("http://127.0.0.1:9/v1", "sk-shared", rpm=600)
    other = ApiClient("http://127.0.0.1:9/v1", "sk-other")
    assert policy.gate is grader.gate and policy.gate.pacer.limits == (600, None)
    assert describe_pace({"policy": policy, "grader": grader, "judge": other, "none": None}) == (
        "policy+grader: 0 req/s; judge: 0 req/s"
    )


def test_an_api_call_refused_for_quota_is_not_retried() -> None:
    calls = 0

    async def no_credit(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        error = {"message": "You exceeded your current quota", "code": "insufficient_quota"}
        return web.json_response({"error": error}, status=429)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/files", no_credit)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        client = ApiClient(f"http://127.0.0.1:{port}/v1", "sk-files")
        try:
            with pytest.raises(QuotaExhausted, match="no quota left"):
                await client.api("POST", "/files", json_body={})
        finally:
            await client.aclose()
            await runner.cleanup()

    asyncio.run(main())
    assert calls == 1
