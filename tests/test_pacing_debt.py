"""What a pace makes of limits that count refusals: the debt the headers show, a limiter's hint as a limit, hints
padded once seen short, a slow start while no limit is known, a burst allowance spent once and never the cushion,
a free rate no faster than the lasting start rate, a 429 at the pace met by keeping just under the factor it
refused, and a hint in whole seconds not held for its rounding at the pace. Pure models on a simulated clock."""

from __future__ import annotations

import json

import pytest

from healthbench.api.failures import read_refusal
from healthbench.api.pacing import BURST, LocalPace, Pacer
from healthbench.api.pacing.pacer import FIRST_WINDOW
from healthbench.api.pacing.state import (
    EDGE,
    EDGE_PLATEAU,
    GROWTH,
    HEADROOM,
    LASTING,
    Admission,
    Effects,
    Learned,
    Slowdown,
)
from tests.pacesim import COST

LIMIT = {"x-ratelimit-limit-requests": "6000"}  # a hundred a second


def _answered(pacer: Pacer, at: float, remaining: int, reset: str) -> None:
    ticket = pacer.start(at - 0.3, COST)
    pacer.on_answer(
        at, ticket, LIMIT | {"x-ratelimit-remaining-requests": str(remaining), "x-ratelimit-reset-requests": reset}
    )


def test_a_debt_the_headers_show_is_waited_out() -> None:
    pacer = Pacer()
    _answered(pacer, 0.3, 99, "10ms")  # the bucket holds a hundred
    # Refused requests drove it 20 into debt: what remains reads 0, and it is full again in 1.2 s, not 1 s.
    _answered(pacer, 1.0, 0, "1.2s")
    assert pacer.delay(1.0, COST)[0] == pytest.approx((1 + 20) / 100)
    # A wait that says no more than the bucket's size takes is no debt: one request's refill.
    _answered(pacer, 2.0, 0, "1s")
    assert pacer.delay(2.0, COST)[0] == pytest.approx(1 / 100)


def _limitless(headers: dict[str, str]) -> tuple[Effects, float | None]:
    pacer = Pacer()
    tickets = [pacer.start(i / 100, COST) for i in range(100)]  # a hundred starts in the last second
    body = json.dumps({"error": {"message": "Rate limit reached for requests", "code": "rate_limit_exceeded"}})
    return pacer.on_refused(1.0, tickets[0], COST, read_refusal(body.encode(), headers), headers)


def test_a_limiters_own_hint_makes_a_429_a_limit_though_it_names_no_size() -> None:
    # retry-after-ms is a limiter's word on its bucket: every start is held, and the pace cut, at the first.
    effects, retry = _limitless({"retry-after-ms": "20"})
    assert retry == 0.0 and effects.hold == pytest.approx(0.02 + 0.01) and effects.slow and effects.slow.hard
    # A bare Retry-After is a gateway's "slow down": one in a hundred is noise, and only that request waits.
    effects, retry = _limitless({"retry-after": "1"})
    assert retry == 1.0 and effects.hold is None and effects.slow and not effects.slow.hard


def _rpm_429(wait: str) -> bytes:
    message = (
        "Rate limit reached for gpt-4.1 in organization org-x on requests per min (RPM): Limit 600, Used 600, "
        f"Requested 1. Please try again in {wait}."
    )
    return json.dumps({"error": {"message": message, "code": "rate_limit_exceeded"}}).encode()


def test_once_a_hint_runs_short_it_is_padded_by_the_refused_requests_share_too() -> None:
    pacer = Pacer()
    pacer.adopt(0.0, Admission(0.0, None, rpm=600, request_rate=600 / 60 * HEADROOM))
    refusal = read_refusal(_rpm_429("50ms"), {})
    first, _ = pacer.on_refused(0.0, pacer.start(0.0, COST), COST, refusal, {})
    assert first.hold == pytest.approx(0.05 + 0.01) and not pacer.short
    # Waited out, and refused again: the hint left out the refused request itself, a tenth of a second at ten a
    # second, which a factor on fifty milliseconds would take three more refusals to find.
    second, _ = pacer.on_refused(0.07, pacer.start(0.07, COST), COST, refusal, {})
    assert pacer.short and second.hold == pytest.approx(0.05 * 1.5 + 1 / (10 * HEADROOM))


def test_until_a_limit_is_known_requests_in_flight_grow_by_two_with_each_answer() -> None:
    pacer = Pacer()
    first = [pacer.start(0.0, COST) for _ in range(FIRST_WINDOW)]
    assert pacer.delay(0.01, COST)[0] > 0  # the first window, and no more
    pacer.on_answer(0.3, first[0], {})  # no word of a limit: the window and two more may be out
    tickets = [pacer.start(0.3, COST) for _ in range(3)]
    assert pacer.delay(0.3, COST)[0] > 0
    pacer.on_answer(0.6, tickets[0], {})  # four more than the window
    for _ in range(3):
        assert pacer.delay(0.6, COST)[0] <= 0
        pacer.start(0.6, COST)
    assert pacer.delay(0.6, COST)[0] > 0
    pacer.adopt(0.6, Admission(0.0, None, rpm=6000, request_rate=98.0))  # a limit known: the pace alone
    assert pacer.delay(0.6, COST)[0] <= 0


def test_a_trusted_report_lets_starts_run_ahead_of_the_pace_only_past_a_quarter_of_the_bucket() -> None:
    pacer = Pacer()
    _answered(pacer, 0.3, 99, "10ms")
    wait, _, ahead = pacer.delay(0.3, COST)
    # 99 left of a hundred: this start and 73 more are past the quarter kept to absorb jitter (at most 0.75 s).
    assert wait == 0 and ahead[0] == pytest.approx(BURST + 0.73)
    pace = LocalPace()
    pace.apply_at(0.3, Effects((Learned("requests", 6000, 2),)))
    burst = 0
    while pace.admit_at(0.3, COST, ahead=ahead).wait <= 0:
        burst += 1
    # About those 73 and the catch-up allowance's few at once, where a mirror that alone decided sent 98.
    assert 73 <= burst <= 85
    # A shared pace's mirror never vouches alone: other processes' starts are not in it.
    shared = Pacer(shared=True)
    _answered(shared, 0.3, 99, "10ms")
    assert shared.delay(0.3, COST)[2] == (BURST, BURST)


def test_a_limit_with_no_size_sets_the_free_rate_from_no_more_than_the_lasting_start_rate() -> None:
    pace = LocalPace()
    for i in range(500):
        pace.admit_at(i / 100, 1)  # five seconds at a hundred a second
    for i in range(200):
        pace.admit_at(5 + i / 200, 1)  # a second at two hundred, which the bucket hid until it drained
    moment, lasting = pace.start_rate_now(6.0), pace.start_rate_now(6.0, LASTING)
    assert moment > 150 and 110 < lasting < 140
    pace.apply_at(6.0, Effects(slow=Slowdown(0.2, hard=True)))
    assert pace.free == pytest.approx(lasting * 0.9 * 0.8) and pace.free_top == pytest.approx(lasting * 0.9)


def _paced_run(pace: LocalPace, until: float) -> float:
    """Starts as fast as the pace lets them go, from the pace's last start to `until`; returns the last one's time."""
    at = pace.start_rate_at
    while at < until:
        admission = pace.admit_at(at, 1)
        at += max(admission.wait, 0.001)
    return at


def test_a_429_at_the_pace_keeps_the_factor_just_under_the_one_refused() -> None:
    pace = LocalPace()
    pace.apply_at(0.0, Effects((Learned("requests", 6000, 1),)))
    # A burst past the limit (a slow start's): the usual cut by a tenth, regrown in about five seconds.
    for i in range(300):
        pace.admit_at(i / 300, 1)
    pace.apply_at(1.0, Effects(slow=Slowdown(1.0, hard=True)))
    assert pace.factor(1.0) == pytest.approx(0.9) and pace.factor(7.0) == 1.0
    # Refused while the starts kept to the pace: jitter, a window's edge, or another sender's calls. The factor goes
    # just under the one refused and creeps past it for EDGE_PLATEAU seconds (the same 429 does not come back five
    # seconds later), then regrows as after any cut (another sender may have gone: the limit is this one's again).
    now = _paced_run(pace, 10.0)
    pace.apply_at(now, Effects(slow=Slowdown(1.0, hard=True)))
    assert pace.factor_top == pytest.approx(EDGE) and pace.factor(now) == pytest.approx(EDGE)
    assert EDGE < pace.factor(now + EDGE_PLATEAU) < EDGE * 1.01
    assert pace.factor(now + EDGE_PLATEAU + 1) == pytest.approx(pace.factor(now + EDGE_PLATEAU) * GROWTH)
    # Refused again past that top: it was too high, and comes down further.
    now = _paced_run(pace, now + 30)
    refused = pace.factor(now)
    pace.apply_at(now, Effects(slow=Slowdown(1.0, hard=True)))
    assert pace.factor_top == pytest.approx(refused * EDGE * EDGE)
    # A burst past the pace is cut as ever, and regrows fast to the top only.
    for i in range(300):
        pace.admit_at(now + 2 + i / 300, 1)
    pace.apply_at(now + 3, Effects(slow=Slowdown(1.0, hard=True)))
    assert pace.factor(now + 3) == pytest.approx(pace.factor_top * 0.9, rel=0.01)
    assert pace.factor(now + 10) == pytest.approx(pace.factor_top, rel=0.01)


@pytest.mark.parametrize(
    ("message", "limit", "requested"),
    [
        ("on requests per min (RPM): Limit 6,000, Used 5999.5, Requested 1. Please try again in 10ms.", 6000, 1),
        (
            "on tokens per min (TPM): Limit 30000.0, Used 29000, Requested 3357.2. Please try again in 1.5s.",
            30000,
            3358,
        ),
        ("on requests per minute: Limit 600. Please try again in 1s.", 600, None),
    ],
)
def test_a_limits_numbers_are_read_from_messages_that_imitate_openais(
    message: str, limit: float, requested: int | None
) -> None:
    body = json.dumps({"error": {"message": f"Rate limit reached for m in organization o {message}"}}).encode()
    refusal = read_refusal(body, {})
    assert (refusal.limit, refusal.requested, refusal.hinted) == (limit, requested, True)
    assert refusal.retry_after is not None and refusal.retry_after > 0


def test_a_hint_in_whole_seconds_holds_a_second_less_while_the_starts_keep_to_the_pace() -> None:
    pacer = Pacer()
    pacer.adopt(0.0, Admission(0.0, None, rpm=600, request_rate=10 * HEADROOM))
    # "1s" with no retry-after-ms may stand for a few milliseconds: the hold may overstate it by a second.
    coarse, _ = pacer.on_refused(0.0, pacer.start(0.0, COST), COST, read_refusal(_rpm_429("1s"), {}), {})
    assert coarse.hold == pytest.approx(1.01) and coarse.coarse == 1.0
    for hint, headers in (("1.5s", {}), ("1s", {"retry-after-ms": "1000"})):
        exact, _ = Pacer().on_refused(0.0, 1, COST, read_refusal(_rpm_429(hint), headers), headers)
        assert exact.coarse == 0.0
    # Refused while the starts kept to the pace: the pace's own margin, not the second.
    pace = LocalPace()
    pace.apply_at(0.0, Effects((Learned("requests", 6000, 1),)))
    now = _paced_run(pace, 10.0)
    coarse = Effects(hold=1.01, slow=Slowdown(1.0, hard=True), coarse=1.0)
    pace.apply_at(now, coarse)
    assert pace.hold_until - now == pytest.approx(0.01)
    # Refused after a burst past the pace (a slow start's): the whole hint.
    for i in range(300):
        pace.admit_at(now + 2 + i / 300, 1)
    pace.apply_at(now + 3, coarse)
    assert pace.hold_until - (now + 3) == pytest.approx(1.01)


def test_a_start_refused_after_a_hold_left_a_second_short_has_such_hints_taken_whole() -> None:
    pacer = Pacer()
    pacer.adopt(0.0, Admission(0.0, None, rpm=600, request_rate=10 * HEADROOM))
    refusal = read_refusal(_rpm_429("1s"), {})
    pacer.on_refused(0.0, pacer.start(0.0, COST), COST, refusal, {})
    # The first start after the shorter hold is refused: the hold was short, not the hint (no padding).
    again, _ = pacer.on_refused(0.05, pacer.start(0.02, COST), COST, refusal, {})
    assert again.coarse == 0.0 and again.hold == pytest.approx(1.01) and pacer.pad == 1.0
    # A start after that whole hold goes through: the next such hint may be left short again.
    ticket = pacer.start(1.1, COST)
    pacer.on_answer(1.4, ticket, {})
    later, _ = pacer.on_refused(5.0, pacer.start(5.0, COST), COST, refusal, {})
    assert later.coarse == 1.0
