"""The router of a pool of servers and each server's breaker, without HTTP: which server a request gets a place
at, and when a server leaves and comes back. Time is a clock the test moves; the router's loop is a real one."""

from __future__ import annotations

import asyncio

import pytest

from healthbench.api.breaker import FIRST_COOL_DOWN, OUT_AFTER_DROPS, OUT_AFTER_ERRORS, Breaker, Change, State
from healthbench.api.hosts import Adaptations
from healthbench.api.pacing import Gate
from healthbench.api.pacing.gate import Budgets
from healthbench.api.retrying import VERDICT_HOLDS, Failure, Kind
from healthbench.api.routing import Router, Server


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


REFUSED = Failure(Kind.UNREACHABLE, "connection refused")
RESET = Failure(Kind.DROPPED, "connection reset")
ERROR = Failure(Kind.SERVER_ERROR, "HTTP 500")
LIMIT = Failure(Kind.RATE_LIMITED, "HTTP 429")
NOT_FOUND = Failure(Kind.REFUSED_REQUEST, "HTTP 404: no such model")


def test_a_refused_connection_takes_a_server_out_at_once_and_its_trial_brings_it_back() -> None:
    clock = Clock()
    breaker = Breaker(clock)
    assert breaker.failed(REFUSED, REFUSED.cause) is Change.OUT and breaker.state is State.OUT and not breaker.open()
    clock.now += FIRST_COOL_DOWN
    assert breaker.open()  # its trial may go
    breaker.sent()
    assert not breaker.open()  # one trial at a time
    assert breaker.answered() is Change.BACK and breaker.open()


def test_a_failed_trial_doubles_the_cool_down_and_an_abandoned_one_lets_another_go() -> None:
    clock = Clock()
    breaker = Breaker(clock)
    breaker.failed(REFUSED, REFUSED.cause)
    clock.now += FIRST_COOL_DOWN
    breaker.sent()
    breaker.abandoned()  # cancelled before it was answered
    assert breaker.open()
    breaker.sent()
    assert breaker.failed(REFUSED, REFUSED.cause) is Change.OUT and breaker.cool_down == 2 * FIRST_COOL_DOWN
    clock.now += 2 * FIRST_COOL_DOWN - 0.001
    assert not breaker.open()


def test_drops_and_errors_take_a_server_out_only_in_a_row() -> None:
    breaker = Breaker(Clock())
    for _ in range(OUT_AFTER_DROPS - 1):
        assert breaker.failed(RESET, RESET.cause) is Change.NONE
    breaker.answered()  # an answer between: the count starts again
    for _ in range(OUT_AFTER_DROPS - 1):
        assert breaker.failed(RESET, RESET.cause) is Change.NONE
    assert breaker.failed(RESET, RESET.cause) is Change.OUT
    breaker = Breaker(Clock())
    for _ in range(OUT_AFTER_ERRORS - 1):
        assert breaker.failed(ERROR, ERROR.cause) is Change.NONE
    assert breaker.failed(ERROR, ERROR.cause) is Change.OUT


def test_a_limit_is_no_failure_of_the_server_and_what_no_wait_cures_holds_it_out_longer() -> None:
    breaker = Breaker(Clock())
    assert breaker.failed(LIMIT, LIMIT.cause) is Change.NONE and breaker.state is State.IN
    assert not Breaker.counts(NOT_FOUND)
    assert breaker.failed(NOT_FOUND, NOT_FOUND.cause, lasting=True) is Change.OUT and breaker.cool_down == VERDICT_HOLDS


def servers(count: int, places: int, clock: Clock) -> list[Server]:
    budgets = Budgets(places)
    return [
        Server(
            f"http://s{n}/v1",
            f"http://s{n}/v1/chat/completions",
            budgets.of(f"http://s{n}/v1"),
            Gate(),
            Adaptations(""),
            Breaker(clock),
        )
        for n in range(count)
    ]


async def settled() -> None:
    """Let the loop run what is ready: the requests' steps, the router's dispatch, and the steps it wakes."""
    for _ in range(4):
        await asyncio.sleep(0)


async def granted(router: Router, requests: list[str | None]) -> list[asyncio.Task[Server | None]]:
    """Ask for a place for each request (its affinity) in one turn of the loop, as a reply's items are asked, and
    let the router hand out what it can."""
    tasks = [asyncio.ensure_future(router.acquire(affinity)) for affinity in requests]
    await settled()
    return tasks


def test_a_replys_items_wait_for_their_home_while_other_servers_take_other_replies() -> None:
    async def run() -> None:
        clock = Clock()
        pool = servers(3, 2, clock)
        router = Router(pool, str, clock)
        tasks = await granted(router, [reply for reply in "abc" for _ in range(4)])
        first = {index: task.result() for index, task in enumerate(tasks) if task.done()}
        assert len(first) == 6  # two places at each of three servers
        # Each reply's first two items at one server, a server of its own.
        homes = {"abc"[index // 4]: server for index, server in first.items()}
        assert len(set(homes.values())) == 3
        for index, server in first.items():
            assert server is not None and server is homes["abc"[index // 4]]
            router.release(server)  # answered
        await asyncio.gather(*tasks)
        for index, task in enumerate(tasks):
            assert task.result() is homes["abc"[index // 4]]
        assert (router.counts.homed, router.counts.at_home, router.counts.away) == (3, 9, 0)

    asyncio.run(run())


def test_a_server_with_room_and_nothing_of_its_own_takes_from_the_longest_queue() -> None:
    async def run() -> None:
        clock = Clock()
        pool = servers(2, 1, clock)
        router = Router(pool, str, clock)
        tasks = await granted(router, ["a", "a", "a"])
        done = [task.result() for task in tasks if task.done()]
        assert len(done) == 2 and done[0] is not done[1]  # the idle server did not wait for the other's reply
        assert router.counts.away == 1
        for server in done:
            assert server is not None
            router.release(server)
        await asyncio.gather(*tasks)

    asyncio.run(run())


def test_an_out_server_gives_back_its_queue_and_a_pool_all_out_answers_none() -> None:
    async def run() -> None:
        clock = Clock()
        pool = servers(2, 1, clock)
        router = Router(pool, str, clock)
        [first] = await granted(router, ["a"])
        home = first.result()
        assert home is not None
        other = pool[1] if home is pool[0] else pool[0]
        other.budget.take()  # the other server is busy with something else
        queued = await granted(router, ["a", "a"])
        assert not any(task.done() for task in queued)
        router.release(home)
        router.failed(home, REFUSED)  # it goes out: what waited for it is homed elsewhere
        other.budget.give_back()
        await settled()
        assert queued[0].done() and queued[0].result() is other
        router.release(other)
        router.failed(other, REFUSED)
        await settled()
        assert queued[1].done() and queued[1].result() is None  # every server out
        assert await router.acquire("b") is None
        assert "http://s0/v1: connection refused" in router.out()

    asyncio.run(run())


def test_a_client_of_one_server_is_a_queue_in_arrival_order() -> None:
    async def run() -> None:
        clock = Clock()
        [server] = servers(1, 1, clock)
        router = Router([server], str, clock)
        tasks = await granted(router, ["a", "b", "a", "c"])
        order = []
        for _ in range(4):
            await settled()
            [ready] = [index for index, task in enumerate(tasks) if task.done() and index not in order]
            order.append(ready)
            router.release(server)
        assert order == [0, 1, 2, 3]
        router.failed(server, REFUSED)  # no breaker for a single endpoint: its retry table decides
        assert server.breaker.state is State.IN

    asyncio.run(run())


@pytest.mark.parametrize("count", [2, 5])
def test_places_never_pass_a_budget(count: int) -> None:
    async def run() -> None:
        clock = Clock()
        pool = servers(count, 3, clock)
        router = Router(pool, str, clock)
        tasks = await granted(router, [f"r{n // 7}" for n in range(200)])
        held = 0
        for _ in range(1000):  # a router that stalled would leave requests waiting: bounded, then said below
            if held == 200:
                break
            await settled()
            ready = [task for task in tasks if task.done()]
            assert all(server.budget.in_use <= 3 for server in pool)
            for task in ready:
                server = task.result()
                assert server is not None
                router.release(server)
                tasks.remove(task)
                held += 1
        assert held == 200

    asyncio.run(run())


def test_a_trial_granted_and_cancelled_before_it_goes_lets_another_trial_go() -> None:
    async def run() -> None:
        clock = Clock()
        pool = servers(2, 1, clock)
        router = Router(pool, str, clock)
        out, busy = pool
        router.failed(out, REFUSED)
        [holder] = await granted(router, ["x"])  # the other server's one place, held
        assert holder.result() is busy
        clock.now += FIRST_COOL_DOWN
        [trial] = await granted(router, ["y"])
        assert trial.done() and trial.result() is out  # the out server's trial
        # Cancelled in the same turn as it is granted: `acquire` sees the grant as it is cancelled.
        [again] = await granted(router, ["z"])
        again.cancel()
        await settled()
        assert out.breaker.state is State.TRIAL
        router.abandoned(out)  # what `ApiClient._routed` does for a request that ends with no outcome
        router.release(out)
        assert out.breaker.open()

    asyncio.run(run())


def test_routers_sharing_a_budget_are_offered_its_places_in_turn() -> None:
    """Two keys' graders at one server (serve's): the places that free go to each in turn, so the second key does not
    wait behind everything the first has queued."""

    async def run() -> None:
        clock = Clock()
        [one] = servers(1, 2, clock)
        two = Server(one.base_url, one.url, one.budget, Gate(), Adaptations(""), Breaker(clock))
        first, second = Router([one], str, clock), Router([two], str, clock)
        early = await granted(first, [None] * 20)  # the first key fills the server and queues 18 more
        late = await granted(second, [None] * 5)
        assert sum(task.done() for task in early) == 2 and not any(task.done() for task in late)
        released: set[asyncio.Task[Server | None]] = set()
        for _ in range(10):  # each answer frees a place
            held = next(task for task in early + late if task.done() and task not in released)
            released.add(held)
            server = held.result()
            assert server is not None
            server.budget.give_back()
            await settled()
        # In turn, the second key's five are all in within ten places; in arrival order, none would be.
        assert all(task.done() for task in late)
        for task in early + late:
            task.cancel()
        await settled()

    asyncio.run(run())
