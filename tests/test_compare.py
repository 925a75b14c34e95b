"""Paired comparison of two runs, task by task, on made-up result records."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from healthbench.cli import main
from healthbench.errors import DataError
from healthbench.grading.scoring import PROFESSIONAL_LENGTH_ADJUSTMENT
from healthbench.reporting.compare import MIN_MARKED, compare_dirs, compare_runs, format_comparison
from healthbench.runs.folder import RunFolder
from healthbench.runs.outputs import Comparison
from healthbench.runs.records import RunRecord, SampleRecord


def record(prompt_id: str, score: float, repeat: int = 0, **tags: float) -> SampleRecord:
    """A result record with `overall_score` and extra metrics given as keyword names with `__` for `:`."""
    metrics = {"overall_score": score, **{name.replace("__", ":"): value for name, value in tags.items()}}
    return SampleRecord(prompt_id=prompt_id, repeat=repeat, score=score, metrics=metrics)


def run_json(**fields: Any) -> RunRecord:
    """A run.json of a grade run with these fields, as the release before typed records wrote it (flat)."""
    return RunRecord.model_validate({"command": "grade", **fields})


def update(records: list[SampleRecord], **fields: Any) -> list[SampleRecord]:
    return [r.model_copy(update=fields) for r in records]


A = [
    record("p1", 0.5, theme__hedging=0.5, axis__accuracy=0.25),
    record("p2", 0.2, theme__hedging=0.2),
    record("p3", 1.0, theme__global_health=1.0, axis__accuracy=1.0),
]
B = [
    record("p1", 0.7, theme__hedging=0.7, axis__accuracy=0.75),
    record("p2", 0.1, theme__hedging=0.1, axis__accuracy=0.0),
    record("p3", 1.0, theme__global_health=1.0, axis__accuracy=0.5),
]


def test_hand_computed_means_and_differences() -> None:
    result = compare_runs(A, B)
    overall = result.metrics["overall_score"]
    assert overall.n == 3
    assert overall.mean_a == pytest.approx((0.5 + 0.2 + 1.0) / 3)
    assert overall.mean_b == pytest.approx((0.7 + 0.1 + 1.0) / 3)
    assert overall.diff == pytest.approx((0.2 - 0.1 + 0.0) / 3)
    hedging = result.metrics["theme:hedging"]
    assert hedging.n == 2 and hedging.diff == pytest.approx((0.2 - 0.1) / 2)
    # p2 has axis:accuracy only in B, so it is left out of that metric's pairs.
    accuracy = result.metrics["axis:accuracy"]
    assert accuracy.n == 2
    assert accuracy.mean_a == pytest.approx(0.625)
    assert accuracy.diff == pytest.approx((0.5 - 0.5) / 2)
    assert list(result.metrics) == ["overall_score", "theme:global_health", "theme:hedging", "axis:accuracy"]


def test_interval_contains_the_mean_difference() -> None:
    rng = random.Random(3)
    a = [record(f"p{i}", rng.random()) for i in range(40)]
    b = [record(f"p{i}", rng.random()) for i in range(40)]
    m = compare_runs(a, b, seed=1).metrics["overall_score"]
    assert m.ci_low < m.diff < m.ci_high


def test_interval_is_degenerate_when_all_differences_are_equal() -> None:
    # Binary fractions, so every difference is exactly 0.125 and so is every resample mean.
    a = [record(f"p{i}", value) for i, value in enumerate([0.0, 0.25, 0.5, 0.75, 0.5])]
    b = [record(f"p{i}", value + 0.125) for i, value in enumerate([0.0, 0.25, 0.5, 0.75, 0.5])]
    m = compare_runs(a, b).metrics["overall_score"]
    assert m.ci_low == m.ci_high == m.diff == 0.125


def test_pairs_tasks_with_each_tasks_repeats_averaged() -> None:
    a = [record("p1", 0.0, repeat=0), record("p1", 0.5, repeat=1), record("p2", 0.3)]
    b = [record("p1", 0.9, repeat=1), record("p1", 0.2), record("p3", 1.0)]
    result = compare_runs(a, b)
    overall = result.metrics["overall_score"]
    assert result.n_tasks == overall.n == 1
    assert result.samples.model_dump() == {"a": 2, "b": 2}
    # p1: A's mean (0.0 + 0.5) / 2 = 0.25, B's (0.2 + 0.9) / 2 = 0.55.
    assert overall.diff == pytest.approx(0.30)
    assert (overall.mean_a, overall.mean_b) == pytest.approx((0.25, 0.55))
    assert (result.only_a, result.only_b) == (1, 1)


def test_the_bootstrap_resamples_tasks_not_samples_hand_computed() -> None:
    # p1 has two repeats in each run, with per-repeat differences 0.0 and 0.2: its task difference is 0.1.
    # p2 has one, with difference 0.5. Resampling the two tasks, a resample mean is 0.1 (both draws p1,
    # probability 1/4), 0.3 (1/2) or 0.5 (1/4): the 2.5th and 97.5th percentiles are 0.1 and 0.5 exactly.
    # Resampling the three samples instead would reach 0.0 (the p1 repeat without a difference) and below 0.1.
    a = [record("p1", 0.0, repeat=0), record("p1", 0.5, repeat=1), record("p2", 0.25)]
    b = [record("p1", 0.0, repeat=0), record("p1", 0.7, repeat=1), record("p2", 0.75)]
    overall = compare_runs(a, b, seed=3).metrics["overall_score"]
    assert overall.diff == pytest.approx((0.1 + 0.5) / 2)
    assert (overall.ci_low, overall.ci_high) == pytest.approx((0.1, 0.5))
    # The interval excludes zero, but two tasks are too few to call it a difference.
    assert overall.marked is False and MIN_MARKED > 2


def test_repeats_that_agree_do_not_narrow_the_interval() -> None:
    rng = random.Random(11)
    values = [(rng.random(), rng.random()) for _ in range(30)]
    once = compare_runs(
        [record(f"p{i}", x) for i, (x, _) in enumerate(values)],
        [record(f"p{i}", y) for i, (_, y) in enumerate(values)],
    )
    # The same scores sampled three times over: as much evidence about the runs as once, and so the same interval.
    thrice = compare_runs(
        [record(f"p{i}", x, repeat=r) for r in range(3) for i, (x, _) in enumerate(values)],
        [record(f"p{i}", y, repeat=r) for r in range(3) for i, (_, y) in enumerate(values)],
    )
    assert thrice.metrics.keys() == once.metrics.keys() and thrice.samples.model_dump() == {"a": 90, "b": 90}
    for name, figures in once.metrics.items():
        expected = {key: pytest.approx(value) for key, value in figures.model_dump().items()}
        assert thrice.metrics[name].model_dump() == expected
    assert format_comparison(thrice).splitlines()[0].startswith("30 paired tasks (90 samples in A, 90 in B)")


def test_a_row_of_a_single_task_is_never_marked_and_enough_tasks_are() -> None:
    a = [record(f"p{i}", 0.25, theme__hedging=0.25) if i == 0 else record(f"p{i}", 0.25) for i in range(MIN_MARKED)]
    b = [r.model_copy(update={"score": 0.75, "metrics": {k: 0.75 for k in r.metrics}}) for r in a]
    result = compare_runs(a, b)
    hedging, overall = result.metrics["theme:hedging"], result.metrics["overall_score"]
    assert (hedging.n, hedging.ci_low, hedging.ci_high) == (1, 0.5, 0.5)
    assert hedging.marked is False and overall.marked is True
    lines = {
        line.split()[0]: line
        for line in format_comparison(result).splitlines()
        if line.startswith(("theme", "overall"))
    }
    assert lines["overall_score"].endswith("] *") and not lines["theme:hedging"].endswith("*")


def test_no_paired_tasks_is_an_error_exit(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no paired tasks to compare: A graded 2 tasks, B 1, and none of them"):
        compare_runs([record("p1", 0.1), record("p2", 0.2)], [record("p3", 0.3)])
    first, second = write_run(tmp_path / "a", [record("p1", 0.1)]), write_run(tmp_path / "b", [record("p3", 0.3)])
    for extra in ([], ["--json"]):
        result = CliRunner().invoke(main, ["compare", str(first), str(second), *extra])
        assert result.exit_code == 1 and "no paired tasks to compare" in result.output, result.output
        assert "Traceback" not in result.output


def test_deterministic_for_a_seed_and_independent_of_record_order() -> None:
    rng = random.Random(7)
    a = [record(f"p{i}", rng.random(), theme__x=rng.random()) for i in range(30)]
    b = [record(f"p{i}", rng.random(), theme__x=rng.random()) for i in range(30)]
    first = compare_runs(a, b, seed=5, n_bootstrap=200)
    assert compare_runs(a, b, seed=5, n_bootstrap=200) == first
    assert compare_runs(list(reversed(a)), rng.sample(b, len(b)), seed=5, n_bootstrap=200) == first
    assert compare_runs(a, b, seed=6, n_bootstrap=200) != first


def test_only_overall_theme_and_axis_metrics_are_compared() -> None:
    a = [record("p1", 0.5, level__cluster=0.5, cluster__c=0.5, physician_agreed_category__x=0.5)]
    assert list(compare_runs(a, a).metrics) == ["overall_score"]


def test_duplicate_sample_is_an_error() -> None:
    with pytest.raises(DataError, match="appears twice"):
        compare_runs([record("p1", 0.1), record("p1", 0.2, repeat=0)], [])


def test_format_comparison_table() -> None:
    text = format_comparison(compare_runs(A, B))
    assert "3 paired tasks (3 samples in A, 3 in B); 0 tasks only in A, 0 only in B" in text
    for name in ("overall_score", "theme:hedging", "axis:accuracy"):
        assert name in text
    assert "+0.033" in text  # the overall mean difference


def test_read_results_keeps_u2028_and_skips_a_torn_last_line(tmp_path: Path) -> None:
    rows = [record("p1", 0.5).model_copy(update={"response": "line one\u2028line two"}), record("p2", 0.1)]
    text = "".join(row.model_dump_json() + "\n" for row in rows) + '{"prompt_id": "p3", "sc'
    (tmp_path / "results.jsonl").write_text(text, encoding="utf-8")
    loaded = RunFolder(tmp_path).read_results()
    assert [r.prompt_id for r in loaded] == ["p1", "p2"]
    assert loaded[0].response == "line one\u2028line two"


def test_a_broken_line_before_the_last_stops_the_reader_with_file_and_line(tmp_path: Path) -> None:
    good = record("p1", 0.5).model_dump_json()
    for broken, said in (("garbage", "line 2: not a JSON object"), ('{"prompt_id": "p2"}', "line 2: field score")):
        (tmp_path / "results.jsonl").write_text(f"{good}\n{broken}\n{good}\n", encoding="utf-8")
        with pytest.raises(DataError, match=f"{tmp_path / 'results.jsonl'}: {said}"):
            RunFolder(tmp_path).read_results()


PRO = PROFESSIONAL_LENGTH_ADJUSTMENT.as_dict()
PRO_WORDS = "length-adjusted, center 2000 characters, 0.0147 per 500 characters"


def adjusted(records: list[SampleRecord], shift: float) -> list[SampleRecord]:
    """The records with a made-up `length_adjusted_score` of score + shift."""
    return [r.model_copy(update={"length_adjusted_score": r.score + shift}) for r in records]


def test_neither_run_adjusted_has_overall_score_as_its_headline() -> None:
    result = compare_runs(A, B)
    assert result.headline == "overall_score" and result.headline_mismatch is None
    assert result.headlines.a.model_dump() == {"length_adjusted": False, "length_adjustment": None}
    assert "headline" not in format_comparison(result).lower()


def test_both_runs_adjusted_alike_compare_their_adjusted_scores() -> None:
    run = run_json(length_adjustment=PRO)
    result = compare_runs(adjusted(A, 0.25), adjusted(B, -0.125), run_a=run, run_b=run)
    assert result.headline == "score" and result.headline_mismatch is None
    assert list(result.metrics)[:2] == ["score", "overall_score"]
    score = result.metrics["score"]
    assert score.mean_a == pytest.approx((0.5 + 0.2 + 1.0) / 3 + 0.25)
    assert score.diff == pytest.approx((0.2 - 0.1 + 0.0) / 3 - 0.375)
    assert result.metrics["overall_score"].diff == pytest.approx((0.2 - 0.1 + 0.0) / 3)
    text = format_comparison(result)
    assert f"headline: the score row, in both runs {PRO_WORDS}" in text and "MISMATCH" not in text


def test_one_run_adjusted_and_the_other_not_is_said_plainly() -> None:
    result = compare_runs(adjusted(A, 0.25), B, run_a=run_json(length_adjustment=PRO), run_b=run_json())
    mismatch = result.headline_mismatch
    assert mismatch is not None and f"A's is {PRO_WORDS}, B's is not length-adjusted" in mismatch
    # The score row is each run's own headline: A adjusted, B as graded.
    assert result.metrics["score"].diff == pytest.approx((0.2 - 0.1 + 0.0) / 3 - 0.25)
    assert result.headlines.b.model_dump() == {"length_adjusted": False, "length_adjustment": None}
    text = format_comparison(result)
    assert f"HEADLINE MISMATCH: {mismatch}" in text
    assert json.loads(result.model_dump_json())["headline_mismatch"] == mismatch


def test_runs_adjusted_with_other_settings_are_a_mismatch() -> None:
    other = {"center": 1500, "penalty_per_500_chars": 0.0299}
    result = compare_runs(
        adjusted(A, 0.1),
        adjusted(B, 0.1),
        run_a=run_json(length_adjustment=PRO),
        run_b=run_json(length_adjustment=other),
    )
    assert "B's is length-adjusted, center 1500 characters, 0.0299 per 500 characters" in str(result.headline_mismatch)
    unknown = compare_runs(adjusted(A, 0.1), adjusted(B, 0.1), run_a=run_json(length_adjustment=PRO))
    assert "B's is length-adjusted, settings not recorded" in str(unknown.headline_mismatch)


def test_professional_slices_are_compared_per_example_tag_family() -> None:
    tags = ["use_case:consult", "type:red_teaming", "difficulty:hard", "specialty:oncology"]
    a = [record("p1", 0.5).model_copy(update={"example_tags": [*tags, "physician_agreed_category:x"]})]
    b = [record("p1", 0.75).model_copy(update={"example_tags": tags})]
    a, b = (
        [r.model_copy(update={"metrics": r.metrics | dict.fromkeys([*r.example_tags, "level:example"], r.score)})]
        for [r] in (a, b)
    )
    result = compare_runs(a, b)
    assert list(result.metrics) == ["overall_score", *tags]
    assert result.metrics["specialty:oncology"].diff == 0.25


def test_compare_dirs_reads_each_runs_settings(tmp_path: Path) -> None:
    for name, records, run in (("a", adjusted(A, 0.0), {"command": "grade", "length_adjustment": PRO}), ("b", B, None)):
        write_run(tmp_path / name, records, run)
    result = compare_dirs(tmp_path / "a", tmp_path / "b", seed=2, n_bootstrap=50)
    assert result.headlines.a.model_dump() == {"length_adjusted": True, "length_adjustment": PRO}
    assert result.headline_mismatch is not None and result.n_bootstrap == 50


def test_a_run_rescored_after_grading_is_adjusted_from_its_replies() -> None:
    # No length_adjusted_score in the records, but run.json says how the run is scored: 1000 chars at
    # center 2000, penalty 0.0147 gain 0.0294 each.
    with_replies = update(A, response="x" * 1000)
    result = compare_runs(with_replies, adjusted(A, 0.0294), run_a=run_json(length_adjustment=PRO))
    assert result.headlines.a.model_dump() == {"length_adjusted": True, "length_adjustment": PRO}
    assert result.metrics["score"].diff == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(DataError, match=r"run B: sample 'p1' repeat 0: field response"):
        compare_runs(A, A, run_b=run_json(length_adjustment=PRO))


def test_a_run_json_that_cannot_be_read_is_named_with_its_field(tmp_path: Path) -> None:
    write_run(tmp_path / "a", A, {"command": "grade", "length_adjustment": {"center": 2000}})
    write_run(tmp_path / "b", B)
    with pytest.raises(DataError, match=r"a/run.json: field length_adjustment.penalty_per_500_chars: Field required"):
        compare_dirs(tmp_path / "a", tmp_path / "b")


def test_means_are_clipped_as_metrics_json_clips_them_and_differences_are_not() -> None:
    # Task scores can fall below 0 (penalties) and a length-adjusted one can rise above 1.
    a = [record("p1", -0.5, theme__x=-0.5), record("p2", -0.25, theme__x=-0.25)]
    b = [record("p1", 0.25, theme__x=0.25), record("p2", -0.25, theme__x=-0.25)]
    result = compare_runs(a, b)
    overall = result.metrics["overall_score"]
    assert (overall.mean_a, overall.mean_b) == (0.0, 0.0)  # as metrics.json would show each run
    assert (overall.mean_a_unclipped, overall.mean_b_unclipped) == (-0.375, 0.0)
    assert overall.diff == 0.375 == overall.mean_b_unclipped - overall.mean_a_unclipped
    assert overall.clipped is True
    high = compare_runs(adjusted(A, 0.5), adjusted(A, 0.0), run_a=run_json(length_adjustment=PRO)).metrics["score"]
    assert high.mean_a == 1.0 and high.mean_a_unclipped > 1.0 and high.mean_b < 1.0
    text = format_comparison(result)
    assert "0.000    0.000   +0.375" in text and text.count("] ^") == 2  # overall_score and theme:x
    assert "B - A is not mean B - mean A" in text
    plain = compare_runs(A, B)
    assert not any(m.clipped for m in plain.metrics.values())
    assert "^ marks" not in format_comparison(plain) and "Means are clipped to [0, 1]" in format_comparison(plain)


def write_run(folder: Path, records: list[SampleRecord], run: dict[str, Any] | None = None) -> Path:
    folder.mkdir()
    (folder / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records), encoding="utf-8")
    if run is not None:
        (folder / "run.json").write_text(json.dumps(run), encoding="utf-8")
    return folder


def test_the_table_and_json_name_run_a_and_run_b(tmp_path: Path) -> None:
    first, second = write_run(tmp_path / "gpt-4.1", A), write_run(tmp_path / "o3", B)
    result = compare_dirs(first, second, n_bootstrap=20)
    assert (result.a, result.b) == (str(first), str(second))
    text = format_comparison(result)
    assert text.startswith(f"A: {first}\nB: {second}\n")
    cli = CliRunner().invoke(main, ["compare", str(first), str(second), "--json", "--n-bootstrap", "20"])
    assert cli.exit_code == 0, cli.output
    assert (json.loads(cli.output)["a"], json.loads(cli.output)["b"]) == (str(first), str(second))


def test_a_meta_eval_run_or_an_empty_folder_is_refused_by_name(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", A)
    meta = write_run(tmp_path / "meta", [], {"command": "meta-eval"})
    (meta / "results.jsonl").write_text("".join(json.dumps({"prompt_id": "p1", "index": i}) + "\n" for i in range(2)))
    (empty := tmp_path / "empty").mkdir()
    for other, said in ((meta, f"{meta}: a meta-eval run grades the grader"), (empty, f"{empty}/results.jsonl: no")):
        result = CliRunner().invoke(main, ["compare", str(run), str(other)])
        assert result.exit_code == 1 and said in result.output and "Traceback" not in result.output


def test_compare_json_is_its_record_and_names_an_unfinished_run(tmp_path: Path) -> None:
    finished = {"version": 2, "spec": {"command": "grade"}, "stats": {"samples": 2}}
    first = write_run(tmp_path / "a", A, finished)
    (first / "metrics.json").write_text(json.dumps({"score": 0.5}))
    failed = {"version": 2, "spec": {"command": "grade"}, "stats": {"samples": 4, "failed": 2}}
    second = write_run(tmp_path / "b", B, failed)
    said = f"B ({second}) is not a finished run (2 samples could not be graded): compared on the tasks it graded"
    cli = CliRunner().invoke(main, ["compare", str(first), str(second), "--json", "--n-bootstrap", "20"])
    assert cli.exit_code == 0, cli.output
    written = json.loads(cli.output)
    # Written by the record: read back, it dumps to the very JSON printed, its version first.
    assert Comparison.model_validate(written).model_dump(mode="json") == written
    assert list(written)[:2] == ["version", "a"] and written["unfinished"] == [said]
    table = CliRunner().invoke(main, ["compare", str(first), str(second), "--n-bootstrap", "20"])
    assert table.exit_code == 0 and f"UNFINISHED: {said}\n" in table.output, table.output
    # A's metrics.json is there and B has none: it is named too, and the finished A is not.
    (first / "metrics.json").unlink()
    result = compare_dirs(first, second, n_bootstrap=20)
    assert result.unfinished == [
        f"A ({first}) is not a finished run (metrics.json is missing): compared on the tasks it graded",
        said,
    ]
    with pytest.raises(ValidationError, match="compare's JSON of version 2, which this release does not read"):
        Comparison.model_validate(written | {"version": 2})
