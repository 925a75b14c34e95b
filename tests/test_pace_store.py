"""The pace shared through a real Redis: the scripts keep the local pace's rules, processes share one pace, the
key never reaches the store, and the store's faults (unreachable at start, lost and back mid-run)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from healthbench.api.client import ApiClient
from healthbench.api.failures import read_refusal
from healthbench.api.keygates import key_slot
from healthbench.api.pacing import Pacer
from healthbench.api.pacing import store as store_module
from healthbench.api.pacing.state import EDGE, HEADROOM, PACED, Admission, Effects, Learned, LocalPace, Slowdown
from healthbench.api.pacing.store import PaceStore, RedisPace, redacted
from healthbench.errors import PaceStoreUnreachable, SettingsError
from healthbench.testing import FakeOpenAI
from healthbench.testing.limits import RateLimits
from tests.redisserver import RedisServer, needs_redis

pytestmark = needs_redis

KEY = "sk-shared-pace-secret"
REFUSAL = json.dumps(
    {"error": {"message": "Rate limit reached for m on requests per min (RPM): Limit 6000, Used 6000, Requested 1."}}
).encode()


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_the_store_keeps_the_rules_of_the_local_pace(redis: RedisServer, request: pytest.FixtureRequest) -> None:
    async def main() -> None:
        store = PaceStore(redis.url)
        pace = store.pace(key_slot("https://rules.test/v1", request.node.name)).remote
        free = PACED
        first = await pace.admit(100, 0.0, free, (None, None))
        assert first.wait == 0 and first.rpm is None and first.request_rate is None  # nothing known: unpaced
        # Precedence: a message's limit, then the headers', then the user's; of two users' settings, the lower.
        await pace.apply(Effects((Learned("requests", 3000, 1),)))
        await pace.apply(Effects((Learned("requests", 6000, 2),)))
        await pace.apply(Effects((Learned("requests", 1000, 1),)))
        assert (await pace.admit(1, 0.0, free, (None, None))).rpm == 6000
        assert (await pace.admit(1, 0.0, free, (600, None))).rpm == 600
        assert (await pace.admit(1, 0.0, free, (1200, None))).rpm == 600
        # One every ten seconds (less the headroom), the lower user's setting standing: the pace holds the next
        # start back by one interval at most, or reserves it within the horizon. The pace runs on Redis's clock, so
        # its intervals and hold are seconds long: a loaded machine's delay between two calls (tenths of a second)
        # cannot change what they find.
        interval = 60 / (6 * HEADROOM)
        while (await pace.admit(1, 0.0, free, (6, None))).wait > 0:
            pass  # the faster pace's last start is a tenth of a second ahead at most: until one goes at the slow one
        held = await pace.admit(1, 0.0, free, (6, None))
        assert held.rpm == 6 and held.reason == "RPM" and interval / 2 < held.wait <= interval
        reserved = await pace.admit(1, 1.5 * interval, free, (6, None))
        assert reserved.reserved and interval / 2 < reserved.wait <= interval
        # A 429's hold stops every start; of two cuts in one window only the first counts.
        await pace.apply(Effects(hold=100.0, slow=Slowdown(1.0, hard=True)))
        await pace.apply(Effects(slow=Slowdown(1.0, hard=True)))
        after = await pace.admit(1, 1.5 * interval, free, (6, None))
        assert after.reason == "429" and 90 < after.wait <= 100 and not after.reserved
        assert after.request_rate == pytest.approx(6 / 60 * 0.9 * HEADROOM, rel=0.01)  # below the limit
        await store.aclose()

    _run(main())


def test_with_no_limit_known_the_store_sets_a_free_rate_as_the_local_pace_does(
    redis: RedisServer, request: pytest.FixtureRequest
) -> None:
    async def main() -> tuple[dict[Any, Any], float | None]:
        store = PaceStore(redis.url)
        pace = store.pace(key_slot("https://free.test/v1", request.node.name)).remote
        for _ in range(100):
            await pace.admit(1, 0.0, PACED, (None, None))
        await pace.apply(Effects(slow=Slowdown(0.05, hard=False)))  # noise never starts a pace
        unpaced = (await pace.admit(1, 0.0, PACED, (None, None))).request_rate
        await pace.apply(Effects(slow=Slowdown(0.5, hard=True)))
        fields = await store.client().hgetall(pace.keys[0])
        await store.aclose()
        return fields, unpaced

    fields, unpaced = _run(main())
    local = LocalPace()
    for _ in range(100):
        local.admit_at(0.0, 1)
    local.apply_at(0.0, Effects(slow=Slowdown(0.5, hard=True)))
    assert unpaced is None and local.free is not None
    # The same rule on either clock: half the start rate, regrowing fast up to nine tenths of the lasting start
    # rate (here no less: every start came at once).
    assert float(fields["free"]) / float(fields["best"]) == pytest.approx(local.free / local.best) == 0.5
    assert float(fields["free"]) / float(fields["free_top"]) == pytest.approx(local.free / local.free_top, rel=1e-3)


@pytest.mark.parametrize("rate", [95.0, 300.0])
def test_a_429_at_the_pace_keeps_the_factor_just_under_the_refused_one_as_the_local_pace_does(
    rate: float, redis: RedisServer, request: pytest.FixtureRequest
) -> None:
    # The start rate is written into the store as of Redis's clock just before each 429 is applied: a loaded
    # machine's delay before the script runs (a tenth of a second takes 95 a second to 86) cannot move it across
    # the bounds of the pace (99 a second, then 95).
    async def main() -> dict[Any, Any]:
        store = PaceStore(redis.url)
        client = store.client()
        pace = store.pace(key_slot("https://edge.test/v1", request.node.name)).remote
        await pace.apply(Effects((Learned("requests", 6000, 1),)))
        for _ in range(2):
            seconds, micros = await client.time()
            now = seconds + micros / 1e6
            # Starts at `rate` for a hundred seconds, and the last cut a window ago at least.
            fields = {"sr": rate, "sr_at": now, "first": now - 100, "cut_at": now - 10}
            await client.hset(pace.keys[0], mapping={key: f"{value:.6f}" for key, value in fields.items()})
            await pace.apply(Effects(slow=Slowdown(1.0, hard=True)))
        stored = await client.hgetall(pace.keys[0])
        await store.aclose()
        return stored

    stored = _run(main())
    local = LocalPace()
    local.apply_at(0.0, Effects((Learned("requests", 6000, 1),)))
    for _ in range(2):
        local.start_rate, local.start_rate_at, local.first_start, local.cut_at = rate, 0.0, -100.0, -10.0
        local.apply_at(0.0, Effects(slow=Slowdown(1.0, hard=True)))
    if rate < 99:  # at the pace: just under the factor refused, then further under once refused at that top
        assert local.factor_top == pytest.approx(EDGE**3)
    else:  # past it: two cuts by a tenth, the top untouched
        assert local.factor_top == 1.0 and local.factor_cut == pytest.approx(0.81)
    assert float(stored.get("f_top", 1.0)) == pytest.approx(local.factor_top, rel=1e-3)
    assert float(stored["f"]) == pytest.approx(local.factor_cut, rel=1e-3)


def test_two_processes_share_one_pace(redis: RedisServer, request: pytest.FixtureRequest) -> None:
    async def main() -> None:
        slot = key_slot("https://shared.test/v1", request.node.name)
        one, two = PaceStore(redis.url), PaceStore(redis.url)  # two processes' stores
        await one.pace(slot).remote.apply(Effects((Learned("requests", 60, 2),)))
        paces = (one.pace(slot), two.pace(slot), one.pace(slot))
        # A start a second, reserved up to ten seconds ahead: the first goes at once, and each later one is
        # reserved a second after the one before, whichever process asked for it. (Margins of about half a
        # second on Redis's clock: a loaded machine's delay between the calls cannot change what they find.)
        starts = [await pace.admit(1, 10.0, PACED, (None, None)) for pace in paces]
        assert starts[0].wait == 0 and not starts[0].reserved
        assert starts[1].reserved and starts[2].reserved and starts[2].reason == "RPM"
        assert 0.4 < starts[1].wait < 1.0 and starts[2].wait - starts[1].wait > 0.5
        assert starts[1].rpm == 60 and starts[1].sharers == 2
        await one.aclose()
        await two.aclose()

    _run(main())


def test_the_key_never_reaches_the_store(redis: RedisServer) -> None:
    async def main() -> list[str]:
        store = PaceStore(redis.url)
        with FakeOpenAI(limits=RateLimits(rpm=6000)) as server:
            assert server.base_url
            client = ApiClient(server.base_url, KEY, pace_store=store, rpm=3000)
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
            await asyncio.gather(*(client.complete(body, str) for _ in range(5)))
            await client.aclose()
        redis_client = store.client()
        keys = [key async for key in redis_client.scan_iter()]
        dump = list(keys)
        for key in keys:
            dump += [str(value) for value in (await redis_client.hgetall(key) if "processes" not in key else [])]
        await store.aclose()
        return dump

    dump = _run(main())
    assert any(text.startswith("healthbench:pace:{") for text in dump)  # named by a digest
    assert not any(KEY in text or "sk-" in text for text in dump)


def test_a_store_out_of_reach_at_start_is_refused_by_its_url_without_the_password(redis: RedisServer) -> None:
    closed = RedisServer(redis.folder)  # a free port where nothing listens
    store = PaceStore(f"redis://:hunter2@127.0.0.1:{closed.port}/0")
    with pytest.raises(PaceStoreUnreachable) as refused:
        store.check()
    assert f"127.0.0.1:{closed.port}/0" in str(refused.value) and "hunter2" not in str(refused.value)
    PaceStore(redis.url).check()  # a store that answers passes
    with pytest.raises(SettingsError, match="database must be a number"):
        PaceStore("redis://127.0.0.1:6379/pace")
    with pytest.raises(SettingsError, match="not a Redis URL"):
        PaceStore("http://127.0.0.1:6379/0")
    assert redacted("rediss://user:pw@host:6380/2") == "rediss://user:***@host:6380/2"


def test_a_store_lost_mid_run_is_one_warning_then_local_pacing_then_shared_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_RETRY_EVERY", 0.0)  # ping again at every start while it is out of reach
    server = RedisServer(tmp_path)
    server.start()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}

    async def main(fake: FakeOpenAI) -> tuple[int, dict[Any, Any]]:
        assert fake.base_url
        store = PaceStore(server.url)
        client = ApiClient(fake.base_url, "sk-lost", pace_store=store)
        replies = 0
        for phase in ("shared", "lost", "back"):
            if phase == "lost":
                server.kill()
            if phase == "back":
                server.start()
            for _ in range(3):  # a few rounds, so the store is found again after its restart
                got = await asyncio.gather(*(client.complete(body, str) for _ in range(20)))
                replies += len(got)
        state = await store.client().hgetall(RedisPace(store, key_slot(fake.base_url, "sk-lost")).keys[0])
        await client.aclose()
        await store.aclose()
        return replies, state

    try:
        with (
            caplog.at_level(logging.INFO, logger="healthbench.pacing"),
            FakeOpenAI(limits=RateLimits(rpm=60_000)) as fake,
        ):
            replies, state = _run(main(fake))
            answered, sent = fake.responses_by_kind["ok"], fake.requests_total
    finally:
        server.kill()
    assert replies == answered == sent == 180  # nothing lost, nothing asked twice
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "lost" in warnings[0].getMessage() and server.url in warnings[0].getMessage()
    assert any("back" in record.getMessage() for record in caplog.records)
    assert float(state["rpm"]) == 60_000  # the restarted store was told again what had been learned


def test_a_stand_in_for_a_lost_store_still_counts_the_processes_sharing_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key other processes pace too is never taken for a sibling's by this process's own starts of it
    # (`pacing.siblings`): while the store is out of reach, the stand-in says so as the store last did.
    monkeypatch.setattr(store_module, "_RETRY_EVERY", 3600.0)  # no ping back while the test runs
    server = RedisServer(tmp_path)
    server.start()
    slot = key_slot("https://lost.test/v1", "sk-two-processes")

    async def main() -> tuple[Admission, Admission]:
        one, two = PaceStore(server.url), PaceStore(server.url)  # two processes' stores
        pace = one.pace(slot)
        await two.pace(slot).admit(1, 0.0, PACED, (None, None))
        shared = await pace.admit(1, 0.0, PACED, (None, None))
        server.kill()
        standing_in = await pace.admit(1, 0.0, PACED, (None, None))
        for store in (one, two):
            await store.aclose()
        return shared, standing_in

    try:
        shared, standing_in = _run(main())
    finally:
        server.kill()
    assert shared.sharers == standing_in.sharers == 2
    pacer = Pacer(shared=True)
    pacer.adopt(0.0, standing_in)
    ticket = pacer.start(0.0, 1)
    pacer.on_refused(0.1, ticket, 1, read_refusal(REFUSAL, {}), {})
    assert pacer.refused_by is not None and pacer.refused_by.shared


@pytest.mark.parametrize(("rate", "cut_ago", "held"), [(95.0, 10.0, 0.01), (300.0, 10.0, 1.01), (105.0, 0.5, 0.01)])
def test_a_hint_in_whole_seconds_is_held_as_the_local_pace_holds_it(
    rate: float, cut_ago: float, held: float, redis: RedisServer, request: pytest.FixtureRequest
) -> None:
    # At the pace (99 a second), or not past the pace before a cut in the last second, a hold a second shorter.
    effects = Effects(hold=1.01, coarse=1.0)

    async def main() -> float:
        store = PaceStore(redis.url)
        client = store.client()
        pace = store.pace(key_slot("https://coarse.test/v1", request.node.name)).remote
        await pace.apply(Effects((Learned("requests", 6000, 1),)))
        seconds, micros = await client.time()
        now = seconds + micros / 1e6
        fields = {"sr": rate, "sr_at": now, "first": now - 100, "cut_at": now - cut_ago}
        await client.hset(pace.keys[0], mapping={key: f"{value:.6f}" for key, value in fields.items()})
        await pace.apply(effects)
        stored = await client.hgetall(pace.keys[0])
        await store.aclose()
        return float(stored["hold"]) - now

    stored = _run(main())
    local = LocalPace()
    local.apply_at(0.0, Effects((Learned("requests", 6000, 1),)))
    local.start_rate, local.start_rate_at, local.first_start, local.cut_at = rate, 0.0, -100.0, -cut_ago
    local.apply_at(0.0, effects)
    assert local.hold_until == pytest.approx(held)
    assert stored == pytest.approx(held, abs=0.05)  # on Redis's clock, a moment after the rate was written
