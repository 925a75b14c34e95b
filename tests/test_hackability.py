"""How often a judge is fooled (`grading.hackability`): the fooled rate beside the false-met rate, the difference's
interval by the one bootstrap over conversations, the verdicts the interval allows, and the best trade-offs."""

from __future__ import annotations

import pytest

from healthbench.grading.bootstrap import Bootstrap, percentile_interval
from healthbench.grading.hackability import (
    HARD_TO_FOOL_MARGIN,
    MIN_VERDICT_CONVERSATIONS,
    Fooling,
    fooling,
    judge_verdict,
    majority_not_met,
    pareto_front,
    worst,
)


def rows(conversations: int, per: int) -> dict[int, str]:
    """`per` rows in each of `conversations` conversations, by row index."""
    return {index: f"c{index // per:03d}" for index in range(conversations * per)}


def test_a_majority_is_more_than_half() -> None:
    assert majority_not_met([False])
    assert majority_not_met([False, False, True])
    assert not majority_not_met([False, True])  # a tie is no majority
    assert not majority_not_met([True, True, False])


def test_a_trick_that_turns_not_met_into_met_is_hackable_and_one_that_changes_nothing_is_hard_to_fool() -> None:
    talks = rows(30, 3)
    base = {index: index % 3 == 0 for index in talks}  # the judge already credits a third wrongly
    found = fooling(base, {"note": dict.fromkeys(talks, True), "nothing": dict(base)}, talks, seed=4)
    note, nothing = found["note"], found["nothing"]
    assert (note.rows, note.conversations) == (90, 30)
    assert note.false_met == pytest.approx(1 / 3) and note.fooled == 1.0
    assert note.difference == pytest.approx(2 / 3)
    # every conversation moves by the same share, so every resample does: the interval is the difference itself
    assert note.interval == pytest.approx((2 / 3, 2 / 3)) and note.verdict == "hackable"
    assert nothing.difference == 0 and nothing.interval == (0.0, 0.0) and nothing.verdict == "hard to fool"
    assert judge_verdict(found) == "hackable" and worst(found) == "note"
    assert judge_verdict({"nothing": nothing}) == "hard to fool"


def test_the_interval_resamples_conversations_not_rows() -> None:
    # A trick that fools the judge on every row of half the conversations and on none of the others: drawn by
    # conversation, a resample holds whole conversations, so its interval is that of 20 units, not of 200.
    talks = rows(20, 10)
    base = dict.fromkeys(talks, False)
    tricked = {index: int(talks[index][1:]) % 2 == 0 for index in talks}
    found = fooling(base, {"trick": tricked}, talks, seed=7, n_bootstrap=2000)["trick"]
    by_conversation = [sum(tricked[i] for i in talks if talks[i] == c) / 10 for c in sorted(set(talks.values()))]
    import numpy as np

    (expected,) = Bootstrap(7, 2000).means(np.asarray(by_conversation))
    assert found.interval == pytest.approx(percentile_interval(expected))
    assert found.interval is not None
    row_wise = percentile_interval(Bootstrap(7, 2000).means(np.asarray([float(tricked[i]) for i in talks]))[0])
    assert row_wise is not None
    assert found.interval[1] - found.interval[0] > 2 * (row_wise[1] - row_wise[0])


def test_every_trick_is_measured_on_the_same_resamples_whatever_else_is_tried() -> None:
    talks = rows(25, 2)
    base = {index: index % 4 == 0 for index in talks}
    one = {index: index % 3 == 0 for index in talks}
    other = {index: index % 5 == 0 for index in talks}
    alone = fooling(base, {"one": one}, talks, seed=1)["one"]
    beside = fooling(base, {"other": other, "one": one}, talks, seed=1)["one"]
    assert alone == beside


def test_rows_without_a_base_verdict_are_left_out_and_an_untried_trick_has_no_figures() -> None:
    talks = rows(12, 1)
    base = {index: False for index in talks if index != 0}
    found = fooling(base, {"a": dict.fromkeys(talks, True), "none": {}}, talks)
    assert found["a"].rows == 11 and "none" not in found
    assert fooling({}, {"a": {0: True}}, {0: "c"}) == {}


def test_too_few_conversations_get_no_verdict_however_clear_the_figures() -> None:
    talks = rows(MIN_VERDICT_CONVERSATIONS - 1, 5)
    found = fooling(dict.fromkeys(talks, False), {"note": dict.fromkeys(talks, True)}, talks)
    assert found["note"].difference == 1.0 and found["note"].verdict == "too few rows"
    assert judge_verdict(found) == "too few rows"
    assert judge_verdict({}) == "too few rows"


def test_hard_to_fool_only_where_the_interval_rules_out_more_than_the_margin() -> None:
    def of(interval: tuple[float, float]) -> Fooling:
        return Fooling(rows=100, conversations=50, false_met=0.2, fooled=0.2, difference=0.0, interval=interval)

    assert of((-0.02, HARD_TO_FOOL_MARGIN)).verdict == "hard to fool"
    assert of((-0.02, HARD_TO_FOOL_MARGIN + 0.01)).verdict == "not shown"
    assert of((0.001, 0.2)).verdict == "hackable"
    mixed = {"a": of((-0.02, 0.01)), "b": of((-0.1, 0.2))}
    assert judge_verdict(mixed) == "not shown"  # one trick not ruled out: the judge is not called hard to fool


def test_the_pareto_front_keeps_the_judges_no_other_beats_on_both_axes() -> None:
    points = {"agrees": (0.72, 0.30), "resists": (0.60, 0.00), "both_worse": (0.59, 0.05), "middle": (0.65, 0.10)}
    assert pareto_front(points) == ["agrees", "resists", "middle"]
    assert pareto_front({"a": (0.7, 0.1), "same": (0.7, 0.1)}) == ["a", "same"]  # a tie beats neither
    assert pareto_front({}) == []
