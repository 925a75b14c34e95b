"""Whole runs through the pacing model on a simulated clock: processes of `Pacer`s on one `LocalPace` (shared,
or each its own) against the fake's limiter, as `Gate` drives them, in milliseconds and with no sleeps."""

from __future__ import annotations

import heapq
import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

from healthbench.api.failures import read_refusal
from healthbench.api.pacing import LocalPace, Pace, Pacer
from healthbench.api.pacing.siblings import Siblings
from healthbench.api.ratesignals import request_cost
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
# What a gateway says when it is overloaded: a 429 with a retry time and nothing else.
SLOW_DOWN = json.dumps({"error": {"message": "Too many requests, slow down", "code": None}}).encode()


@dataclass
class Run:
    answered: int
    refused: int  # by the limiter
    noise: int  # limitless 429s injected before it
    seconds: float
    paces: list[Pace]
    pacers: list[Pacer]
    joined: bool = False  # an eval's two keys ended pacing through one state (`pacing.siblings`)

    @property
    def share_refused(self) -> float:
        return self.refused / (self.answered + self.refused)


# An eval's shape: each policy answer is graded against a task's rubric items, twelve on a median HealthBench task.
ITEMS = 12
# Issue 47's bar for an eval against the plainest limiter (`RateLimits.plain`): (share of rate x wall, most refused)
# with refused requests not counted, and counted.
PLAIN_BAR = {False: (0.90, 0.03), True: (0.85, 0.05)}
POLICY_CONCURRENCY = 32  # eval's default for the model's calls


@dataclass(eq=False)  # a sibling of another key's, held weakly by identity
class _Process:
    pacer: Pacer
    state: LocalPace
    ready: int
    concurrency: int
    in_flight: int = 0
    busy_until: float = 0.0  # a reserved start sleeps holding its gate
    wake: float = math.inf
    attempts: dict[int, int] = field(default_factory=dict)


def simulate(
    limits: RateLimits | None,
    *,
    calls: int = 2000,
    processes: int = 1,
    shared: bool = False,
    concurrency: int = 64,
    noise: float = 0.0,
    noise_retry: float = 1.0,
    user: tuple[float | None, float | None] = (None, None),
    kind: type[Limiter] = Limiter,
    refusal_latency: float = 0.001,
    arrival: float = 0.0,
    seed: int = 7,
    policy: int = 0,
    one_key: bool = True,
    siblings: bool = True,
    apart: bool = False,
    unseen: float = 0.0,
) -> Run:
    """`calls` grader calls in each of `processes` processes, `concurrency` at once in each, 300 +/- 100 ms
    latency; a limiter's 429s come back after `refusal_latency` (at once, by default), requests reach it up to
    `arrival` seconds after they start (a loaded client, a network), and a share `noise` of requests is answered
    by a limitless 429 (`Retry-After: noise_retry`) before it. With `shared`, the processes pace through one
    state, as through a store (starts reserved up to 0.1 s ahead, as `Gate` does then). `seed` draws the
    latencies, arrivals and noise: another seed is another run of the same limiter.

    With `policy` calls, the run is an eval's in one process instead: `policy` model calls (`POLICY_CONCURRENCY` at
    once), each answer adding `ITEMS` grader calls (`concurrency` at once), on one key's gate (`one_key`), or on a
    gate each (a policy key and a grader key that one limiter counts together, as an organization's keys are):
    siblings at one endpoint, as `keygates` makes them (`pacing.siblings`), or, with `siblings` False, keys whose
    gates cannot see each other (as in two processes); with `apart`, each key has a limiter of its own (two
    organizations' keys); `unseen` requests a second of a sender this process cannot see (another process using the
    first key) spend the first key's limiter while the run lasts."""
    limiter = kind(limits, now=0.0) if limits is not None else None
    rng = random.Random(seed)
    common = LocalPace(shared=True) if shared else None
    procs = [_Process(Pacer(shared=shared), common or LocalPace(), calls, concurrency) for _ in range(processes)]
    if policy:
        procs = [_Process(Pacer(), LocalPace(), policy, POLICY_CONCURRENCY)]
        pacer, pace = (procs[0].pacer, procs[0].state) if one_key else (Pacer(), LocalPace())
        procs.append(_Process(pacer, pace, 0, concurrency))
        processes = 2
    # An eval's keys at its one endpoint, as `keygates` groups their gates (one process's).
    endpoint: Siblings[LocalPace] = Siblings()
    for index, proc in enumerate(procs if policy and siblings else []):
        endpoint.add(proc, str(index))
    limiters = [kind(limits, now=0.0) if apart and limits is not None else limiter for _ in procs]
    horizon = 0.1 if shared else 0.0
    events: list[tuple[float, int, str, int, Any]] = []
    sequence = 0
    answered = refused = noised = 0
    end = 0.0
    paces: list[Pace] = []

    def push(at: float, what: str, index: int, data: Any = None) -> None:
        nonlocal sequence
        sequence += 1
        heapq.heappush(events, (at, sequence, what, index, data))

    def send(index: int, now: float) -> None:
        proc = procs[index]
        ticket = proc.pacer.start(now, COST)
        if noise and rng.random() < noise:
            push(now + 0.001, "429", index, (ticket, SLOW_DOWN, {"retry-after": str(noise_retry)}, True))
        elif arrival:
            push(now + rng.uniform(0.0, arrival), "arrive", index, ticket)
        else:
            arrive(index, now, ticket)

    def arrive(index: int, now: float, ticket: int) -> None:
        own = limiters[index]
        response, headers = own.admit(GRADER_BODY, now) if own else (None, {})
        if response is None:
            push(now + rng.uniform(0.2, 0.4), "ok", index, (ticket, headers))
        else:
            assert isinstance(response.body, bytes)
            push(now + refusal_latency, "429", index, (ticket, response.body, dict(response.headers), False))

    def pump(index: int, now: float) -> None:
        proc = procs[index]
        while proc.ready and proc.in_flight < proc.concurrency and now >= proc.busy_until:
            wait, reason, paced = proc.pacer.delay(now, COST)
            if wait <= 0:
                admission = proc.state.admit_at(now, proc.pacer.scaled(COST), horizon, paced, user)
                proc.pacer.adopt(now, admission)
                if admission.wait <= 0 or admission.reserved:
                    proc.ready, proc.in_flight = proc.ready - 1, proc.in_flight + 1
                    if admission.reserved:
                        proc.busy_until = now + admission.wait
                        push(proc.busy_until, "send", index)
                        return
                    send(index, now)
                    continue
                wait, reason = admission.wait, admission.reason
            proc.pacer.bound(now, reason)
            if now + wait < proc.wake or proc.wake <= now:
                proc.wake = now + wait
                push(proc.wake, "wake", index)
            return

    for index in range(processes):
        pump(index, 0.0)
    if unseen:
        push(0.0, "unseen", 0)
    while events:
        now, _, what, index, data = heapq.heappop(events)
        proc = procs[index]
        if what == "unseen":
            if limiters[0] is not None:
                limiters[0].admit(GRADER_BODY, now)
            if any(event[2] != "unseen" for event in events):
                push(now + 1 / unseen, "unseen", 0)
            continue
        if what == "send":
            send(index, now)
        elif what == "arrive":
            arrive(index, now, data)
        elif what == "ok":
            ticket, headers = data
            answered, proc.in_flight, end = answered + 1, proc.in_flight - 1, now
            proc.state.apply_at(now, proc.pacer.on_answer(now, ticket, headers))
            if policy and index == 0:
                procs[1].ready += ITEMS
            if answered % 100 == 0:
                paces.append(proc.pacer.status(now))
        elif what == "429":
            ticket, body, headers, injected = data
            noised, refused = noised + injected, refused + (not injected)
            proc.in_flight -= 1
            effects, retry = proc.pacer.on_refused(now, ticket, COST, read_refusal(body, headers), headers)
            proc.state.apply_at(now, effects)
            if effects.slow is not None and effects.slow.hard:
                endpoint.refused(proc)
            if retry == 0:
                proc.ready += 1
            else:  # as the client's retry table waits: the hint, else its backoff
                attempt = proc.attempts[ticket] = proc.attempts.get(ticket, 0) + 1
                backoff = min(8.0, 0.5 * 2.0 ** (attempt - 1)) * (1 - 0.25 * rng.random())
                push(now + (retry if retry is not None else backoff), "ready", index)
        elif what == "ready":
            proc.ready += 1
        elif proc.wake == now:
            proc.wake = math.inf
        for other in range(processes):
            pump(other, now)
    joined = bool(policy) and not one_key and procs[0].state is procs[1].state
    return Run(answered, refused, noised, end, paces, [proc.pacer for proc in procs], joined)
