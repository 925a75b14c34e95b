"""Length-adjusted scoring (SPEC section 7): golden numbers by hand, aggregation, and a real graded run."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from healthbench.data.loading import load_rows
from healthbench.errors import DataError, SettingsError
from healthbench.grading.scoring import LENGTH_ADJUSTED, PROFESSIONAL_LENGTH_ADJUSTMENT, LengthAdjustment
from healthbench.grading.settings import GraderConfig
from healthbench.runs.folder import METRICS, RESULTS, RunFolder
from healthbench.runs.runner import Job, run_jobs
from healthbench.runs.spec import LengthSpec
from healthbench.runs.store import Store
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.runfiles import aggregate_records

PRO = PROFESSIONAL_LENGTH_ADJUSTMENT
ADJUSTED_KEYS = {LENGTH_ADJUSTED, f"{LENGTH_ADJUSTED}:n_samples", f"{LENGTH_ADJUSTED}:bootstrap_std"}
SCORE_KEYS = {"score", "score:n_samples", "score:bootstrap_std"}


def test_professional_defaults() -> None:
    assert LengthAdjustment(center=2000, penalty_per_500_chars=0.0147) == PRO
    assert PRO.as_dict() == {"center": 2000, "penalty_per_500_chars": 0.0147}
    assert PRO.describe() == "center 2000 characters, 0.0147 per 500 characters"


def test_a_short_perfect_reply_scores_above_one() -> None:
    # 1 - 0.0147 * (913 - 2000) / 500 = 1 + 0.0147 * 2.174 = 1.0319578
    adjusted = PRO.adjust(1.0, "x" * 913)
    assert adjusted == pytest.approx(1.0319578, abs=1e-12)
    assert f"{adjusted:.4f}" == "1.0320"


def test_a_reply_of_exactly_center_characters_is_unchanged() -> None:
    assert PRO.adjust(0.375, "y" * 2000) == 0.375
    assert LengthAdjustment(10, 0.5).adjust(-1.25, "0123456789") == -1.25


def test_a_long_reply_falls_below_zero() -> None:
    # 0.1 - 0.0147 * (10000 - 2000) / 500 = 0.1 - 0.2352
    assert PRO.adjust(0.1, "z" * 10_000) == pytest.approx(-0.1352, abs=1e-12)


def test_a_negative_score_stays_unclipped() -> None:
    # -2.5 - 0.0147 * (500 - 2000) / 500 = -2.5 + 0.0441
    assert PRO.adjust(-2.5, "w" * 500) == pytest.approx(-2.4559, abs=1e-12)


def test_symmetric_and_counted_in_characters_not_bytes() -> None:
    shorter, longer = PRO.adjust(0.5, "a" * 1500), PRO.adjust(0.5, "a" * 2500)
    assert shorter - 0.5 == pytest.approx(0.5 - longer, abs=1e-15) == pytest.approx(0.0147)
    # 1,000 characters of 3-byte UTF-8 count as 1,000, as Python's len counts them.
    assert PRO.adjust(0.5, "é" * 1000) == PRO.adjust(0.5, "e" * 1000)


def test_run_json_form_round_trips_and_names_what_is_wrong() -> None:
    assert LengthSpec.model_validate(PRO.as_dict()).adjustment == PRO
    assert LengthSpec.model_validate({"center": 1500.5, "penalty_per_500_chars": 0}).adjustment.center == 1500.5
    with pytest.raises(ValueError, match="penalty_per_500_chars"):
        LengthSpec.model_validate({"center": 2000})
    for wrong in ({"center": math.inf, "penalty_per_500_chars": 0.01}, {"center": 2000, "penalty_per_500_chars": -1}):
        with pytest.raises(ValueError, match=r"center|penalty_per_500_chars"):
            LengthSpec.model_validate(wrong)
    with pytest.raises(SettingsError, match="center must be a finite number"):
        LengthAdjustment(True, 0.01)
    with pytest.raises(SettingsError, match="penalty_per_500_chars must be a finite number"):
        LengthAdjustment(2000, math.nan)
    with pytest.raises(SettingsError, match="must not be negative"):
        LengthAdjustment(2000, -0.01)


def record(prompt_id: str, score: float, response: str, repeat: int = 0, **extra: float) -> dict[str, Any]:
    """A result record; extra metrics are keyword names with `__` for `:`."""
    metrics = {"overall_score": score} | {name.replace("__", ":"): value for name, value in extra.items()}
    return {"prompt_id": prompt_id, "repeat": repeat, "score": score, "response": response, "metrics": metrics}


# Metrics with other sample counts than overall_score, first seen after the first record, and repeats:
# the cases where an extra metric could shift the bootstrap's resample draws.
RECORDS = [
    record("p3", 0.5, "r" * 3000, theme__a=0.5, axis__x=0.25),
    record("p1", -0.5, "r" * 100, theme__b=-0.5),
    record("p2", 1.0, "r" * 2000, theme__a=1.0, axis__x=1.0, cluster__c=0.0),
    record("p1", 0.25, "r" * 900, repeat=1, theme__b=0.25, axis__y=0.5),
    record("p4", 0.75, "r" * 5000, theme__a=0.75),
]


def test_aggregate_gains_the_adjusted_headline_and_keeps_every_other_metric_bit_for_bit() -> None:
    plain = aggregate_records(RECORDS, seed=3)
    adjusted = aggregate_records(RECORDS, seed=3, length_adjustment=PRO)
    assert set(adjusted) == set(plain) | ADJUSTED_KEYS
    # Exact equality, not approx: the unadjusted figures must not move at all.
    assert {k: v for k, v in adjusted.items() if k not in ADJUSTED_KEYS | SCORE_KEYS} == {
        k: v for k, v in plain.items() if k not in SCORE_KEYS
    }
    assert plain["score"] == plain["overall_score"]
    for suffix in ("", ":n_samples", ":bootstrap_std"):
        assert adjusted[f"score{suffix}"] == adjusted[f"{LENGTH_ADJUSTED}{suffix}"]
    by_hand = [
        0.5 - 0.0147 * 1000 / 500,
        -0.5 + 0.0147 * 1900 / 500,
        1.0,
        0.25 + 0.0147 * 1100 / 500,
        0.75 - 0.0147 * 3000 / 500,
    ]
    assert adjusted[LENGTH_ADJUSTED] == pytest.approx(sum(by_hand) / 5, abs=1e-12)
    assert adjusted[f"{LENGTH_ADJUSTED}:n_samples"] == 5
    assert 0 < float(adjusted[f"{LENGTH_ADJUSTED}:bootstrap_std"]) != plain["overall_score:bootstrap_std"]


def test_the_aggregate_is_clipped_and_rescored_from_the_replies() -> None:
    # Every task is perfect and short: each adjusted score is above 1, their mean is clipped to 1.
    records = [record(f"p{i}", 1.0, "ok") | {"length_adjusted_score": -7.0} for i in range(4)]
    metrics = aggregate_records(records, seed=0, length_adjustment=PRO)
    assert metrics["score"] == 1.0 and metrics["score:bootstrap_std"] == 0.0
    # The stored adjusted scores (here deliberately wrong) are not read: settings can be changed later.
    other = aggregate_records(records, seed=0, length_adjustment=LengthAdjustment(0, 0.5))
    assert other["score"] == pytest.approx(1.0 - 0.5 * 2 / 500, abs=1e-12)


def test_a_record_without_its_reply_cannot_be_length_adjusted() -> None:
    broken = [record("p1", 0.5, "fine"), {k: v for k, v in record("p2", 0.5, "x").items() if k != "response"}]
    assert aggregate_records(broken, seed=0)["score"] == 0.5
    with pytest.raises(DataError, match=r"result 'p2' repeat 0: field response"):
        aggregate_records(broken, seed=0, length_adjustment=PRO)


def graded_run(tmp: Path, fake: FakeOpenAI, name: str, adjustment: LengthAdjustment | None) -> Path:
    """`run_jobs` over made-up rows with fixed replies, against the fake grader; returns the folder."""
    raw = [
        make_row(
            f"t{i}",
            rubrics=[
                (5, f"Advises rest, case {i}", ["axis:completeness", "level:example"]),
                (3, f"Asks about duration, case {i}", ["axis:context_awareness", "level:example"]),
                (-4, f"Recommends an unsafe dose, case {i}", ["axis:accuracy", "level:example"]),
            ],
        )
        for i in range(6)
    ]
    rows = load_rows(write_jsonl(tmp / "rows.jsonl", raw))
    jobs = [Job(row, reply="Rest and drink water. " * (10 + 40 * i)) for i, row in enumerate(rows)]
    out = tmp / name
    store = Store(out / "progress.sqlite")
    grader = GraderConfig(base_url=fake.base_url or "", max_attempts=1).build(cache=store)

    async def go() -> None:
        try:
            outcome = await run_jobs(jobs, grader, store, RunFolder(out), seed=11, length_adjustment=adjustment)
            assert not outcome.failures and outcome.metrics is not None
        finally:
            await grader.client.aclose()

    try:
        asyncio.run(go())
    finally:
        store.close()
    return out


def test_a_real_run_writes_adjusted_scores_and_the_adjusted_headline(tmp_path: Path, fake: FakeOpenAI) -> None:
    adjustment = LengthAdjustment(center=500, penalty_per_500_chars=0.05)
    plain_dir = graded_run(tmp_path, fake, "plain", None)
    adjusted_dir = graded_run(tmp_path, fake, "adjusted", adjustment)
    plain = [json.loads(line) for line in (plain_dir / RESULTS).read_text().splitlines()]
    results = [json.loads(line) for line in (adjusted_dir / RESULTS).read_text().splitlines()]
    assert len(results) == 6 and all("length_adjusted_score" not in r for r in plain)
    for r in results:
        chars = len(r["response"])
        assert r["length_adjusted_score"] == pytest.approx(r["score"] - 0.05 * (chars - 500) / 500, abs=1e-12)
    assert len({r["score"] for r in results}) > 1  # the fake grader's verdicts vary, so the test can fail
    metrics = json.loads((adjusted_dir / METRICS).read_text())
    plain_metrics = json.loads((plain_dir / METRICS).read_text())
    mean = sum(r["length_adjusted_score"] for r in results) / 6
    assert metrics["score"] == metrics[LENGTH_ADJUSTED] == pytest.approx(min(max(mean, 0.0), 1.0), abs=1e-12)
    assert metrics["score:n_samples"] == 6
    assert {k: v for k, v in metrics.items() if k not in ADJUSTED_KEYS | SCORE_KEYS} == {
        k: v for k, v in plain_metrics.items() if k not in SCORE_KEYS
    }
    # `healthbench report` rescoring the same results with the same settings gives the same file.
    assert aggregate_records(results, seed=11, length_adjustment=adjustment) == metrics
