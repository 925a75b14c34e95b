"""What wakes a start that waits for the pace (one look a start where only time can let it go), and which keys
start without the slow start (limits known already: the user's, the pace store's, an earlier client's)."""

from __future__ import annotations

import asyncio
from typing import Any

from healthbench.api.client import ApiClient
from healthbench.api.pacing import Gate
from healthbench.api.pacing.pacer import FIRST_WINDOW
from healthbench.testing import FakeOpenAI
from healthbench.testing.limits import RateLimits


class _Looks:
    """Counts the times a gate's starts look at the process's own pace (`Pacer.delay`)."""

    def __init__(self, gate: Gate) -> None:
        self.count = 0
        delay = gate.pacer.delay

        def counted(now: float, cost: int) -> Any:
            self.count += 1
            return delay(now, cost)

        gate.pacer.delay = counted  # type: ignore[method-assign]


async def _napping(gate: Gate, start: asyncio.Task[int]) -> None:
    """Yield to the loop until `start` waits in the gate (a bounded number of turns, no clock)."""
    for _ in range(100):
        if gate._waker is not None:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"the start never waited: {start}")


def test_answers_that_change_nothing_in_the_pace_do_not_wake_a_start_it_holds() -> None:
    async def main() -> int:
        gate = Gate()
        gate.set_limits(60, None)  # a start a second: the second start waits about 0.9 s for the pace
        looks = _Looks(gate)
        first = await gate.start(10)
        second = asyncio.create_task(gate.start(10))
        await _napping(gate, second)
        for _ in range(20):
            await gate.answered(first, {})
        assert not second.done()
        await second
        return looks.count

    # One look for the first start; the second looks once, waits out the pace, and looks once more: the twenty
    # answers in between woke it for nothing before (22 looks then).
    assert asyncio.run(main()) == 3


def test_an_answer_wakes_a_start_the_slow_start_holds_at_once() -> None:
    async def main() -> None:
        gate = Gate()  # nothing known of the key: the first window out until the first answer
        first, *_ = [await gate.start(10) for _ in range(FIRST_WINDOW)]
        second = asyncio.create_task(gate.start(10))
        await _napping(gate, second)
        await gate.answered(first, {})
        for _ in range(100):
            if second.done():
                break
            await asyncio.sleep(0)
        # Released by the answer itself, not by the probe's five-second timer.
        assert second.done()

    asyncio.run(main())


def _chat(i: int) -> dict[str, Any]:
    return {"model": "gpt-test", "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 10}


async def _complete(client: ApiClient, count: int) -> None:
    try:
        await asyncio.gather(*(client.complete(_chat(i), str) for i in range(count)))
    finally:
        await client.aclose()


def test_a_key_an_earlier_client_of_this_process_learned_starts_at_its_limits() -> None:
    with FakeOpenAI(limits=RateLimits(rpm=60_000)) as server:  # x-ratelimit headers on every answer
        assert server.base_url
        earlier = ApiClient(server.base_url, "sk-known", concurrency=8)
        # More than the first window, so that starts after the first answers take up what they said.
        asyncio.run(_complete(earlier, FIRST_WINDOW + 2))
        assert earlier.server.gate.limits == (60_000, None)
        del earlier  # its gate goes with it: what it learned stays with the process

        later = ApiClient(server.base_url, "sk-known", concurrency=8)
        stranger = ApiClient(server.base_url, "sk-unknown", concurrency=8)

        async def held_after_the_first_window(client: ApiClient) -> bool:
            # Before any answer: the slow start holds a start past its first window until an answer comes.
            for _ in range(FIRST_WINDOW):
                await client.server.gate.start(10)
            return client.server.gate.pacer.delay(client.server.gate._clock(), 10)[0] > 0

        assert asyncio.run(held_after_the_first_window(later)) is False
        assert asyncio.run(held_after_the_first_window(stranger)) is True
        assert later.server.gate.limits == (60_000, None)
        assert stranger.server.gate.limits == (None, None)
