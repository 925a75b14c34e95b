"""The progress bar's status line: calls answered per second over the last few seconds, beside each key's request
starts over the same span, each labelled; driven by a made-up clock, so nothing here depends on timing."""

from __future__ import annotations

import pytest

from healthbench.api.wire import Usage
from healthbench.runs.pricing import RATE_SPAN, CostMeter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_is_of_the_last_seconds_not_the_session_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr("time.monotonic", clock)  # the meter reads time.monotonic() as it is called
    meter = CostMeter(None, "gpt-4.1", "gpt-4.1")
    clock.now += 0.5  # under a second in: the rate is over the session so far
    assert meter.progress(Usage(calls=10), Usage(calls=20)).startswith("answered 60 calls/s, $")
    clock.now += 19.5
    meter.progress(Usage(calls=10), Usage(calls=990))  # 1,000 calls in 20 s: a session mean of 50/s
    clock.now += RATE_SPAN
    line = meter.progress(Usage(calls=10), Usage(calls=1490))  # 500 more in the last 5 s
    assert line.startswith("answered 100 calls/s, $") and line.endswith(" so far")
    clock.now += 2 * RATE_SPAN
    assert meter.progress(Usage(calls=10), Usage(calls=1490)).startswith("answered 0 calls/s")  # stalled
