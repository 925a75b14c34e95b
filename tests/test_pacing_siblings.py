"""Two keys at one endpoint that spend one limit pace together (`pacing.siblings`): an eval's policy and grader keys
at issue 47's bar, the evidence piece by piece, keys with limits of their own never joined, and the gates that
`keygates` makes siblings."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

import pytest

from healthbench.api.client import ApiClient
from healthbench.api.failures import RateLimited, read_refusal
from healthbench.api.keygates import gate_for, key_slot
from healthbench.api.pacing import Gate, LocalPace, Pacer
from healthbench.api.pacing.siblings import Siblings, share_a_limit
from healthbench.api.pacing.state import Admission
from healthbench.testing.limits import Limiter, RateLimits, WindowKind
from tests.pacesim import COST, GRADER_BODY, PLAIN_BAR, simulate

RATE = 100.0  # requests a second


@pytest.mark.parametrize("counted", [False, True])
@pytest.mark.parametrize("refusal_latency", [0.001, 0.3])
def test_an_evals_policy_and_grader_keys_that_share_a_limit_pace_together_at_the_plainest_limiters_bar(
    counted: bool, refusal_latency: float
) -> None:
    # Issue 47: the plainest limiter counts an eval's policy key and grader key together (one organization's). Each
    # key's pace alone ran to the whole limit; the two together reached 82% of it by the worst seed, 8.4% refused.
    limits = RateLimits.plain(RATE * 60, count_refused=counted)
    run = simulate(limits, calls=0, policy=200, one_key=False, refusal_latency=refusal_latency)
    share, most = PLAIN_BAR[counted]
    assert run.joined and run.answered == 200 * 13
    assert run.answered / run.seconds / RATE >= share and run.share_refused < most


def _variant(kind: WindowKind) -> RateLimits:
    hard = RateLimits.hard(rpm=RATE * 60, headers=False)
    return replace(hard, used_counts_request=True, kind=kind)


# The limiters whose refusals of a key on a limit of its own came closest to the evidence: a sliding log and a fixed
# window of one second with 429s 300 ms late (a key's burst stays in the window, its late refusals keep coming), and
# the hard limiter at 500 requests a minute (the first window of twenty runs it into a debt that outlasts a window).
OWN_LIMITS: list[tuple[str, RateLimits, dict[str, Any]]] = [
    ("plain", RateLimits.plain(RATE * 60), {}),
    ("1 s log, 429s late", _variant("log"), {"refusal_latency": 0.3, "arrival": 0.05}),
    ("1 s fixed, 429s late", _variant("fixed"), {"refusal_latency": 0.3, "arrival": 0.05}),
    ("hard, 500 a minute", RateLimits.hard(500, headers=False), {"policy": 60}),
]


@pytest.mark.parametrize(("name", "limits", "options"), OWN_LIMITS, ids=[row[0] for row in OWN_LIMITS])
@pytest.mark.parametrize("seed", [7, 8, 9])
def test_keys_with_limits_of_their_own_are_never_joined(
    name: str, limits: RateLimits, options: dict[str, Any], seed: int
) -> None:
    settings = {"calls": 0, "policy": 200, "one_key": False, "seed": seed} | options
    assert not simulate(limits, apart=True, **settings).joined
    assert simulate(limits, **settings).joined  # the same limiter counting both: joined


@pytest.mark.parametrize(
    "limits", [RateLimits.plain(RATE * 60), RateLimits.hard(RATE * 60, headers=False), _variant("log")]
)
def test_a_key_an_unseen_sender_spends_too_is_not_joined_to_a_key_at_a_limit_of_its_own(limits: RateLimits) -> None:
    # Another process uses the policy's key (60 requests a second of its limit): the policy is refused short of its
    # limit, while the grader, on a limit of its own, is refused at it. Taken from the policy's refusals alone, the
    # evidence joined the two in 41 of 90 such runs.
    run = simulate(limits, calls=0, policy=400, one_key=False, apart=True, unseen=60.0)
    assert not run.joined and run.refused > 0


def _429(per_minute: float) -> RateLimited:
    """A refusal of the plainest limiter of `per_minute` requests, as it words it."""
    limiter = Limiter(RateLimits.plain(per_minute), now=0.0)
    while True:
        response, _ = limiter.admit(GRADER_BODY, 0.0)
        if response is not None:
            assert isinstance(response.body, bytes)
            return read_refusal(response.body, dict(response.headers))


def _refused(starts: list[float], at: float, per_minute: float = RATE * 60, sharers: int = 1) -> Pacer:
    """A key's pacer: `starts`, the last of them refused at `at` by a limit of `per_minute`."""
    pacer = Pacer()
    pacer.adopt(0.0, Admission(0.0, None, rpm=per_minute, request_rate=per_minute / 60, sharers=sharers))
    tickets = [pacer.start(start, COST) for start in starts]
    pacer.on_refused(at, tickets[-1], COST, _429(per_minute), {})
    return pacer


def _spread(count: int, since: float, until: float) -> list[float]:
    return [since + (until - since) * i / count for i in range(count)]


# (the refused key's starts, when it is refused; the other key's starts, when it was refused, the limit's size, the
# processes using the refused key): whether the two share the limit.
EVIDENCE = {
    "60 and 50 starts in the window, both refused": (_spread(60, 0.4, 1.0), 1.01, _spread(50, 0.5, 1.0), 1.0, 6000, 1),
    "its own starts filled the window": (_spread(95, 0.0, 1.0), 1.01, _spread(50, 0.5, 1.0), 1.0, 6000, 1),
    "the other key's own starts filled its window": (_spread(60, 0.4, 1.0), 1.01, _spread(95, 0.0, 1.0), 1.0, 6000, 1),
    "the other key refused a window before": (_spread(60, 1.4, 2.0), 2.01, _spread(50, 0.5, 1.0), 1.0, 6000, 1),
    "the other key refused by another limit": (_spread(60, 0.4, 1.0), 1.01, _spread(50, 0.5, 1.0), 1.0, 3000, 1),
    "the two together under the limit": (_spread(30, 0.4, 1.0), 1.01, _spread(30, 0.5, 1.0), 1.0, 6000, 1),
    "its own burst ran the limit into debt": (
        [0.0] * 300 + _spread(30, 1.6, 2.0),
        2.01,
        _spread(80, 1.2, 2.0),
        2.0,
        6000,
        1,
    ),
    "other processes use the key (a store's)": (_spread(60, 0.4, 1.0), 1.01, _spread(50, 0.5, 1.0), 1.0, 6000, 2),
}


@pytest.mark.parametrize("case", list(EVIDENCE))
def test_two_keys_share_a_limit_only_on_the_evidence_a_limit_of_one_key_cannot_show(case: str) -> None:
    starts, at, other_starts, other_at, other_limit, sharers = EVIDENCE[case]
    refused = _refused(starts, at, sharers=sharers)
    other = _refused(other_starts, other_at, per_minute=other_limit)
    assert share_a_limit(refused, other) is (case == "60 and 50 starts in the window, both refused")


@dataclass(eq=False)
class _Key:
    pacer: Pacer
    state: LocalPace


def test_joined_keys_keep_the_pace_of_the_first_slot_and_bring_their_joined_keys_along() -> None:
    first, second, third = (_Key(Pacer(), LocalPace()) for _ in range(3))
    siblings: Siblings[LocalPace] = Siblings()
    for key, slot in ((first, "a"), (second, "b"), (third, "c")):
        siblings.add(key, slot)
    third.state = second.state  # joined before
    second.pacer = _refused(_spread(50, 0.5, 1.0), 1.0)
    first.pacer = _refused(_spread(60, 0.4, 1.0), 1.01)
    kept = first.state
    assert siblings.refused(first)
    assert second.state is kept and third.state is kept
    assert not siblings.refused(first)  # one pace already


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_gate_refused_for_its_siblings_starts_paces_through_their_state() -> None:
    clock = _Clock()
    policy, grader = Gate(LocalPace(clock), clock), Gate(LocalPace(clock), clock)
    siblings: Siblings[Any] = Siblings()
    for gate, slot in ((policy, "b"), (grader, "a")):
        siblings.add(gate, slot)
        gate.siblings = siblings
    limiter = Limiter(RateLimits.plain(RATE * 60), now=0.0)
    kept = grader.state  # its slot sorts first

    async def main() -> list[bool]:
        # The two keys take turns, 75 starts a second each, answered as they start (the first window of twenty
        # stays open), until each has been refused once: the bucket runs out after two seconds, with 83 of each
        # key's own starts in the last 1.1 s.
        refused = {policy: False, grader: False}
        joined = []
        while not all(refused.values()):
            for gate in (gate for gate, done in refused.items() if not done):
                clock.now += 1 / 150
                ticket = await gate.start(COST)
                response, headers = limiter.admit(GRADER_BODY, clock.now)
                if response is None:
                    await gate.answered(ticket, headers)
                    continue
                assert isinstance(response.body, bytes)
                await gate.refused(ticket, COST, response.body, dict(response.headers))
                refused[gate] = True
                joined.append(policy.state is grader.state)
        return joined

    # Not at the first key's refusal (the other key not yet refused), at the second's.
    assert asyncio.run(main()) == [False, True]
    assert clock.now > 1.5 and policy.state is grader.state is kept


def test_the_gates_of_every_key_at_an_endpoint_are_siblings() -> None:
    url = "http://127.0.0.1:9/siblings/v1"
    policy, grader = ApiClient(url, "sk-policy"), ApiClient(url, "sk-grader")
    elsewhere = ApiClient("http://127.0.0.1:9/elsewhere/v1", "sk-grader")
    gates = [client.server.gate for client in (policy, grader, elsewhere)]
    assert gates[0] is not gates[1] and gates[0].siblings is gates[1].siblings is not None
    assert gates[2].siblings is not gates[0].siblings
    assert gate_for(url + "/", "sk-policy", None) is gates[0]
    assert key_slot(url, "sk-policy") != key_slot(url, "sk-grader")
