"""The fake endpoint's rate limiter: OpenAI's buckets, headers, 429 messages and quota, at a simulated time."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pytest

import healthbench
from healthbench.testing import FakeOpenAI
from healthbench.testing.limits import QUOTA_MESSAGE, Decision, Limiter, RateLimits, request_tokens

OPENAI_TPM_MESSAGE = re.compile(
    r"^Rate limit reached for gpt-test in organization org-fake on tokens per min \(TPM\): "
    r"Limit 60000, Used \d+, Requested \d+\. Please try again in \d+(\.\d+)?m?s\. Visit "
)


def body(chars: int = 400, cap: int | None = 100, key: str = "max_tokens") -> dict[str, Any]:
    request: dict[str, Any] = {"model": "gpt-test", "messages": [{"role": "user", "content": "x" * chars}]}
    if cap is not None:
        request[key] = cap
    return request


def test_a_request_costs_its_prompt_and_its_output_cap() -> None:
    assert request_tokens(body(400, 100), 4096) == 101 + 100
    assert request_tokens(body(400, 7, "max_completion_tokens"), 4096) == 101 + 7
    responses = {"input": [{"role": "user", "content": [{"text": "y" * 40}]}], "max_output_tokens": 9}
    assert request_tokens(responses, 1) == 11 + 9
    assert request_tokens(body(400, None), 4096) == 101 + 4096


def test_requests_per_minute_are_a_bucket_over_the_window_refilled_continuously() -> None:
    limiter = Limiter(RateLimits(rpm=600, window=1.0), now=0.0)  # 10 a second, 10 at once
    decisions = [limiter.decide(body(), 0.0) for _ in range(11)]
    assert [d.refused for d in decisions] == [None] * 10 + ["requests"]
    assert decisions[9].headers["x-ratelimit-limit-requests"] == "600"
    assert decisions[9].headers["x-ratelimit-remaining-requests"] == "0"
    assert limiter.decide(body(), 0.05).refused == "requests"  # half a request refilled, and the refusal spent
    assert limiter.decide(body(), 0.35).refused is None


def test_refused_requests_count_against_the_limit_when_set_to() -> None:
    def admitted(count_refused: bool) -> int:
        limiter = Limiter(RateLimits(rpm=600, count_refused=count_refused), now=0.0)
        # Twenty a second for two seconds, into a limit of ten a second.
        return sum(limiter.decide(body(), t / 20).refused is None for t in range(40))

    assert admitted(count_refused=False) == 10 + 19  # the first burst, then the refill to the ms
    # Each refusal spends what the next request waited for: the same demand gets little more than the burst.
    assert admitted(count_refused=True) <= admitted(count_refused=False) - 10


def test_a_token_refusal_in_openai_words_names_the_limit_and_the_wait() -> None:
    limiter = Limiter(RateLimits(tpm=60_000), now=0.0)  # a thousand tokens a second, a thousand at once
    assert limiter.decide(body(400, 700), 0.0).refused is None  # 801 tokens
    refused = limiter.decide(body(400, 700), 0.0)
    assert refused.refused == "tokens"
    assert OPENAI_TPM_MESSAGE.match(refused.message), refused.message
    assert "Requested 801" in refused.message
    assert int(refused.headers["retry-after-ms"]) > 0
    assert refused.headers["x-ratelimit-limit-tokens"] == "60000"


def test_without_headers_or_numbers_a_refusal_says_only_that_there_was_one() -> None:
    limiter = Limiter(RateLimits(rpm=60, headers=False, numbers=False), now=0.0)
    assert limiter.decide(body(), 0.0) == Decision(None)
    refused = limiter.decide(body(), 0.0)
    assert refused.refused == "requests"
    assert refused.headers == {} and refused.message == "Rate limit reached for requests"


def test_optimistic_hints_leave_out_the_refused_request_itself() -> None:
    def hint(optimistic: bool) -> int:
        limiter = Limiter(RateLimits(rpm=600, optimistic_hints=optimistic), now=0.0)  # ten a second, ten at once
        for _ in range(10):
            limiter.decide(body(), 0.0)
        return int(limiter.decide(body(), 0.0).headers["retry-after-ms"])

    # The refusal spends a request too: an exact hint waits for two to refill, an optimistic one for one.
    assert (hint(optimistic=False), hint(optimistic=True)) == (200, 100)


def test_the_hard_limiter_counts_every_refusal_into_a_debt_without_bound() -> None:
    limiter = Limiter(RateLimits.hard(rpm=600), now=0.0)  # ten a second, ten at once
    decisions = [limiter.decide(body(), 0.0) for _ in range(40)]  # thirty refused: thirty into debt
    assert [d.refused for d in decisions] == [None] * 10 + ["requests"] * 30
    last = decisions[-1].headers
    # What remains reads 0 in debt; the wait until the bucket is full again counts the debt (4 s for 40).
    assert last["x-ratelimit-remaining-requests"] == "0" and last["x-ratelimit-reset-requests"] == "4s"
    # The hint was worked out before this refusal counted: 29 in debt and one to come is 3 s, not 3.1 s.
    assert last["retry-after-ms"] == "3000" and "Please try again in 3s." in decisions[-1].message
    assert limiter.decide(body(), 3.0).refused == "requests"  # waiting the hint exactly is refused again
    assert limiter.decide(body(), 3.2).refused is None
    # The default limiter forgives a debt past one window.
    forgiving = Limiter(RateLimits(rpm=600), now=0.0)
    for _ in range(40):
        forgiving.decide(body(), 0.0)
    assert forgiving.decide(body(), 2.05).refused is None


def test_the_hard_limiter_hints_in_its_429s_without_the_rate_limit_headers_too() -> None:
    limiter = Limiter(RateLimits.hard(rpm=600, headers=False, count_refused=False), now=0.0)
    for _ in range(10):
        assert limiter.decide(body(), 0.0).headers == {}
    refused = limiter.decide(body(), 0.0)
    assert refused.headers == {"retry-after-ms": "100", "Retry-After": "1"}
    assert "Please try again in 100ms." in refused.message


def test_the_plain_limiter_hints_exactly_in_milliseconds_whole_seconds_and_seconds_in_its_message() -> None:
    for counted, wait in ((False, "0.010"), (True, "0.020")):
        limiter = Limiter(RateLimits.plain(rpm=6000, count_refused=counted), now=0.0)  # a hundred at once
        for _ in range(100):
            assert limiter.decide(body(), 0.0).headers == {}  # no x-ratelimit headers
        refused = limiter.decide(body(), 0.0)
        assert refused.headers == {"retry-after-ms": str(int(float(wait) * 1000)), "Retry-After": "1"}
        assert f"Limit 6000, Used 6000, Requested 1. Please try again in {wait}s." in refused.message
        # Exact: the wait it names lets the next request through, and no sooner.
        assert limiter.decide(body(), float(wait) - 0.001).refused == "requests"
        assert limiter.decide(body(), float(wait) + (0.011 if counted else 0.0)).refused is None


@pytest.mark.parametrize(
    ("hints", "headers", "again"),
    [
        ("ms", {"retry-after-ms": "100", "Retry-After": "1"}, "100ms"),
        ("seconds", {"Retry-After": "1"}, "1s"),
        ("message", {}, "100ms"),
    ],
)
def test_a_429_says_when_to_try_again_in_the_style_it_is_set_to(
    hints: Literal["ms", "seconds", "message"], headers: dict[str, str], again: str
) -> None:
    limits = replace(RateLimits.hard(rpm=600, headers=False, count_refused=False), hints=hints)
    limiter = Limiter(limits, now=0.0)  # ten a second, ten at once
    for _ in range(10):
        limiter.decide(body(), 0.0)
    refused = limiter.decide(body(), 0.0)
    assert refused.headers == headers
    assert f"Used 600, Requested 1. Please try again in {again}." in refused.message


def test_used_may_count_the_refused_request_itself() -> None:
    limiter = Limiter(RateLimits(rpm=600, used_counts_request=True), now=0.0)
    for _ in range(10):
        limiter.decide(body(), 0.0)
    assert "Limit 600, Used 660, Requested 1." in limiter.decide(body(), 0.0).message


def test_a_fixed_window_empties_at_its_boundary_and_forgives_its_debt_there() -> None:
    limiter = Limiter(replace(RateLimits.hard(rpm=600), window=10.0, kind="fixed"), now=0.0)  # 100 each 10 s
    assert all(limiter.decide(body(), 0.0).refused is None for _ in range(100))
    refused = limiter.decide(body(), 2.5)  # a sliding bucket would have refilled 25 by now: a fixed one none
    assert refused.refused == "requests" and refused.headers["retry-after-ms"] == "7500"
    for _ in range(50):
        limiter.decide(body(), 9.0)  # refusals into a debt without bound
    assert limiter.decide(body(), 9.99).refused == "requests"
    assert all(limiter.decide(body(), 10.0).refused is None for _ in range(100))


def test_a_sliding_log_gives_back_each_request_a_window_after_it_came() -> None:
    limiter = Limiter(replace(RateLimits.hard(rpm=600), window=10.0, kind="log"), now=0.0)  # 100 in any 10 s
    assert all(limiter.decide(body(), 0.0).refused is None for _ in range(50))
    assert all(limiter.decide(body(), 5.0).refused is None for _ in range(50))
    refused = limiter.decide(body(), 9.0)  # counted too: it leaves the log at 19 s
    assert refused.refused == "requests" and refused.headers["retry-after-ms"] == "1000"
    assert all(limiter.decide(body(), 10.0).refused is None for _ in range(49))
    assert limiter.decide(body(), 10.0).refused == "requests"  # the refusal at 9 s holds its place
    # At 15 s the 50 of 5 s leave; the 49 of 10 s and the two refusals (until 19 s and 20 s) stay.
    assert sum(limiter.decide(body(), 15.0).refused is None for _ in range(60)) == 49


def test_an_injected_429_is_a_gateway_slow_down_with_a_retry_time_and_no_limit() -> None:
    with FakeOpenAI(fault_rate=1.0, faults=["429"], fault_retry_after=1.5) as server:
        assert server.base_url is not None
        [(status, headers, reply)] = asyncio.run(_post_all(server.base_url + "/chat/completions", [body()]))
    assert status == 429 and headers["Retry-After"] == "1.5"
    assert not any(name.lower().startswith("x-ratelimit") for name in headers)
    assert "per min" not in reply["error"]["message"]


def test_the_quota_runs_out_after_the_answered_requests() -> None:
    limiter = Limiter(RateLimits(quota=3), now=0.0)
    outcomes = [limiter.decide(body(), float(t)).refused for t in range(5)]
    assert outcomes == [None, None, None, "quota", "quota"]
    assert limiter.quota_spent and limiter.answered == 3


def test_the_old_rate_setting_is_requests_per_second_with_refusals_not_counted() -> None:
    limits = Limiter(2.0, now=0.0).limits
    assert limits == RateLimits(rpm=120, count_refused=False)
    with pytest.raises(ValueError, match="positive"):
        RateLimits(tpm=0)


async def _post_all(url: str, bodies: list[dict[str, Any]]) -> list[tuple[int, dict[str, str], Any]]:
    async with aiohttp.ClientSession() as session:
        replies = []
        for request in bodies:
            async with session.post(url, json=request) as response:
                replies.append((response.status, dict(response.headers), await response.json()))
        return replies


def test_the_server_refuses_for_quota_as_openai_does() -> None:
    with FakeOpenAI(limits=RateLimits(rpm=6000, quota=2)) as server:
        assert server.base_url is not None
        replies = asyncio.run(_post_all(server.base_url + "/chat/completions", [body()] * 3))
        counts = dict(server.responses_by_kind)
    assert [status for status, _, _ in replies] == [200, 200, 429]
    assert "x-ratelimit-remaining-requests" in replies[0][1]
    error = replies[2][2]["error"]
    assert error["code"] == error["type"] == "insufficient_quota"
    assert error["message"].startswith(QUOTA_MESSAGE)
    assert counts == {"ok": 2, "quota_exhausted": 1}


def test_the_server_sends_rate_limit_refusals_with_openai_code() -> None:
    # The limiter's clock stands still: the second and third requests are refused however slowly they arrive.
    with FakeOpenAI(limits=RateLimits(rpm=60, headers=False), clock=lambda: 0.0) as server:
        assert server.base_url is not None
        replies = asyncio.run(_post_all(server.base_url + "/chat/completions", [body()] * 3))
        counts = dict(server.responses_by_kind)
    assert [status for status, _, _ in replies] == [200, 429, 429]
    assert not any(name.startswith("x-ratelimit") for name in replies[0][1])
    error = replies[1][2]["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests"
    assert "on requests per min (RPM): Limit 60, Used 60, Requested 1." in error["message"]
    assert counts == {"ok": 1, "rate_limited": 2}


def _served(*args: str) -> list[tuple[int, dict[str, str], Any]]:
    """Two requests to `python -m healthbench.testing` run with `args`."""
    src = str(Path(healthbench.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    with subprocess.Popen(
        [sys.executable, "-m", "healthbench.testing", "--port", "0", *args], stdout=subprocess.PIPE, text=True, env=env
    ) as proc:
        try:
            assert proc.stdout is not None
            base_url = proc.stdout.readline().strip()
            return asyncio.run(_post_all(base_url + "/chat/completions", [body()] * 2))
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_the_command_line_serves_the_limiter_it_is_given() -> None:
    replies = _served("--rpm", "600", "--no-rate-headers", "--quota", "1", "--latency", "0.01")
    assert [status for status, _, _ in replies] == [200, 429]
    assert not any(name.lower().startswith("x-ratelimit") for name in replies[0][1])
    assert replies[1][2]["error"]["code"] == "insufficient_quota"
    hard = _served("--rpm", "60", "--no-rate-headers", "--hard-limiter", "--refusal-latency", "0.01")
    seconds = _served("--rpm", "60", "--no-rate-headers", "--hard-limiter", "--retry-hints", "seconds")
    assert seconds[1][1]["Retry-After"] == "1" and "retry-after-ms" not in seconds[1][1]
    assert [status for status, _, _ in hard] == [200, 429]
    # A hint as the hard limiter gives it, with no x-ratelimit header: about a second, less what refilled since.
    assert 500 < int(hard[1][1]["retry-after-ms"]) <= 1000
    assert not any(name.startswith("x-ratelimit") for name in hard[1][1])
