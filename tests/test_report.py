"""The HTML report, rendered from made-up runs."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from healthbench.grading.scoring import (
    LENGTH_ADJUSTED,
    PROFESSIONAL_LENGTH_ADJUSTMENT,
    LengthAdjustment,
    aggregate,
    task_metrics,
)
from healthbench.reporting.report import rebuild, write_report
from tests.runfiles import aggregate_records, render_meta_report, render_report

XSS = "<script>alert(1)</script>"
RUN = {
    "grader_model": "made-up-grader-1",
    "template_sha256": "f" * 64,
    "seed": 0,
    "tasks": 3,
    "cost_usd": 1.234,
}


def make_record(
    prompt_id: str,
    items: Sequence[tuple[int, bool, Sequence[str]]],
    *,
    theme: str = "hedging",
    response: str = "Drink water and rest.",
    repeat: int | None = None,
    example_tags: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A results.jsonl record from (points, met, tags) items, scored by the real scoring code."""
    example_tags = [f"theme:{theme}"] if example_tags is None else list(example_tags)
    metrics = task_metrics(example_tags, [p for p, _, _ in items], [t for _, _, t in items], [m for _, m, _ in items])
    record: dict[str, Any] = {
        "prompt_id": prompt_id,
        "score": metrics["overall_score"],
        "response": response,
        "prompt": [{"role": "system", "content": "Be careful."}, {"role": "user", "content": f"Question {prompt_id}?"}],
        "example_tags": example_tags,
        "metrics": metrics,
        "rubric_items": [
            {"criterion": f"criterion {i} of {prompt_id}", "points": p, "tags": list(t), "criteria_met": m}
            | {"explanation": f"explanation {i}"}
            for i, (p, m, t) in enumerate(items)
        ],
        "usage": {"calls": len(items), "prompt_tokens": 10, "cached_prompt_tokens": 0, "completion_tokens": 2},
        "grader_model": "made-up-grader-1",
    }
    if repeat is not None:
        record["repeat"] = repeat
    return record


RECORDS = [
    make_record(
        "task-a",
        [(5, True, ["axis:accuracy", "cluster:hedging_made_up_criterion"]), (-3, False, ["axis:completeness"])],
    ),
    make_record("task-b", [(4, False, ["axis:accuracy"]), (-6, True, ["axis:completeness"])], theme="global_health"),
    make_record("task-c", [(2, True, ["axis:accuracy"]), (2, True, ["axis:completeness"])], response=XSS),
]


def metrics_of(records: Sequence[dict[str, Any]]) -> dict[str, float | int]:
    return aggregate([r["metrics"] for r in records], seed=0, n_bootstrap=50)


def render(records: Sequence[dict[str, Any]] = RECORDS, run: dict[str, Any] | None = None) -> str:
    return render_report(metrics_of(records), records, RUN if run is None else run)


def test_self_contained_single_document() -> None:
    html = render()
    assert html.startswith("<!DOCTYPE html>") and html.count("</html>") == 1
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.IGNORECASE)
    assert "<link" not in html and "@import" not in html and "url(" not in html


def test_headline_run_facts_and_interval() -> None:
    metrics = metrics_of(RECORDS)
    html = render()
    assert f"{metrics['score']:.3f}" in html
    std = float(metrics["score:bootstrap_std"])
    low, high = max(0.0, float(metrics["score"]) - 1.96 * std), min(1.0, float(metrics["score"]) + 1.96 * std)
    assert f"[{low:.3f}, {high:.3f}]" in html
    for fact in ("made-up-grader-1", "f" * 64, "$1.23", "3 tasks graded"):
        assert fact in html


def test_interval_is_clipped_to_the_unit_range() -> None:
    metrics = {"score": 0.95, "score:bootstrap_std": 0.05, "score:n_samples": 3}
    assert "[0.852, 1.000]" in render_report(metrics, RECORDS, {})


def test_chart_labels_and_every_prompt_id() -> None:
    html = render()
    for label in ("By theme", "By axis", "By consensus criterion", "global health", "completeness"):
        assert label in html
    assert ">hedging made up criterion<" in html
    for record in RECORDS:
        assert f'data-id="{record["prompt_id"]}"' in html


def test_reply_and_ids_are_escaped() -> None:
    records = [*RECORDS, make_record('odd"<id>', [(1, True, ["axis:accuracy"])], theme="<b>x</b>")]
    html = render(records)
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>x</b>" not in html and 'odd"<id>' not in html
    assert html.count("<script") == 1  # the report's own filter script, and nothing from the data


def test_met_negative_items_are_flagged_as_penalties() -> None:
    html = render()
    assert html.count('<li class="penalty">') == 1
    assert "1 penalty" in html
    assert '<li class="avoided">' in html  # task-a's unmet -3 item


def test_negative_task_score_and_no_clusters() -> None:
    records = [make_record("neg", [(2, False, ["axis:accuracy"]), (-5, True, ["axis:accuracy"])])]
    assert records[0]["score"] == -2.5
    html = render(records, run={})
    assert "By consensus criterion" not in html
    assert '<span class="sc neg">-2.500</span>' in html
    assert '<div class="v">0.000</div>' in html  # the mean is clipped, the task score is not


def test_repeats_are_named_and_samples_told_from_tasks() -> None:
    records = [make_record(t, [(1, k == 0, [])], repeat=k) for t in ("r", "s") for k in (0, 1)]
    html = render_report(metrics_of(records), records, {"n_repeats": 2, "samples": 4})
    assert "4 samples graded: 2 tasks, 2 repeats each" in html and "tasks graded" not in html
    assert "<small>repeat 1 of 2</small>" in html and "<small>repeat 2 of 2</small>" in html and "<small>#" not in html
    assert html.count('data-id="r"') == 2 and '<span id="count" data-unit="samples">4 samples</span>' in html
    single = render()
    assert "3 tasks graded" in single and "repeat 1 of" not in single and "samples graded" not in single


def test_incomplete_runs_have_no_score_and_say_what_is_missing() -> None:
    records = [make_record("r", [(1, True, [])], repeat=0), make_record("r", [(1, False, [])], repeat=1)]
    html = render_report({}, records, {})
    banner = html.split('id="unfinished"')[1].split("</div>")[0]
    assert "This run is not finished: no score." in banner and "run.json is missing" in banner
    assert "metrics.json is missing" in banner and "Run the same command again" in banner
    assert '<div class="v">—</div>' in html
    assert 'id="unfinished"' not in render()  # a finished run has no such banner


def test_every_page_warns_against_publishing_it() -> None:
    for html in (render(), render_report({}, RECORDS, {}), render_meta_report({}, {}, {})):
        note = html.split('id="private">')[1].split("</p>")[0]
        assert "HealthBench" in note and "not be posted online in plain text" in note


def test_write_report_reads_the_run_folder(tmp_path: Path) -> None:
    records = [*RECORDS, make_record("sep", [(1, True, [])], response="one\u2028two")]
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    (tmp_path / "results.jsonl").write_text(lines, encoding="utf-8")
    (tmp_path / "metrics.json").write_text(json.dumps(metrics_of(records)), encoding="utf-8")
    (tmp_path / "run.json").write_text(json.dumps(RUN), encoding="utf-8")
    path = write_report(tmp_path)
    assert path == tmp_path / "report.html"
    html = path.read_text(encoding="utf-8")
    assert "one\u2028two" in html and 'data-id="sep"' in html and "made-up-grader-1" in html
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json", "report.html", "results.jsonl", "run.json"]


def test_write_report_without_metrics_or_run(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text(json.dumps(RECORDS[0]) + "\n", encoding="utf-8")
    html = write_report(tmp_path).read_text(encoding="utf-8")
    assert "no score" in html and "task-a" in html


def test_spending_per_side_with_the_batch_share() -> None:
    spent = {
        "whole_run": {
            "policy": {"calls": 0, "batch_calls": 0, "model": "idle", "cost_usd": 0.0},
            "grader": {"calls": 5962, "batch_calls": 5900, "model": "gpt-4.1-2025-04-14", "cost_usd": 6.7},
        }
    }
    html = render_report(metrics_of(RECORDS), RECORDS, RUN, spent)
    row = re.search(r"<tr><td>grader</td>(.*?)</tr>", html.split("whole run<span>")[1])
    assert row is not None
    assert re.findall(r">([^<]+)<", row.group(1)) == ["gpt-4.1-2025-04-14", "5,962", "5,900", *"0000", "$6.70"]
    assert "idle" not in html  # a side that made no calls is not listed
    assert "in batches" not in render()


PRO = PROFESSIONAL_LENGTH_ADJUSTMENT
PRO_RUN = RUN | {"length_adjustment": PRO.as_dict(), "official_configuration": True, "official_differences": []}


def professional_records() -> list[dict[str, Any]]:
    """Made-up HealthBench Professional results: slice tags on the task, no tags on rubric items."""
    slices = [
        ("consult", "good_faith", "hard", "cardiology"),
        ("writing", "red_teaming", "easy", "oncology"),
        ("research", "good_faith", "medium", "cardiology"),
    ]
    return [
        make_record(
            f"pro-{i}",
            [(6, i != 1, []), (3, i == 0, []), (-4, i == 1, [])],
            example_tags=[f"use_case:{u}", f"type:{t}", f"difficulty:{d}", f"specialty:{s}"],
            response="r" * (913 + 1500 * i),
        )
        for i, (u, t, d, s) in enumerate(slices)
    ]


def test_unadjusted_headline_says_so_and_shows_one_score() -> None:
    html = render()
    assert "headline: score, not length-adjusted" in html
    assert "length-adjusted score" not in html and "score without length adjustment" not in html
    assert "official configuration" not in html  # not a Professional run: neither banner nor badge


def test_adjusted_headline_names_its_settings_and_shows_both_scores() -> None:
    records = professional_records()
    metrics = aggregate_records(records, seed=0, length_adjustment=PRO)
    html = render_report(metrics, records, PRO_RUN)
    assert "headline: length-adjusted score, center 2000 characters, 0.0147 per 500 characters" in html
    assert "score without length adjustment (overall_score)" in html
    assert metrics["score"] != metrics["overall_score"]
    assert f'<div class="v">{metrics["score"]:.3f}</div>' in html
    assert f'<div class="v">{metrics["overall_score"]:.3f}</div>' in html
    assert html.index(f"{metrics['score']:.3f}") < html.index(f"{metrics['overall_score']:.3f}")
    assert "HealthBench Professional's official configuration." in html and "Not HealthBench" not in html


def test_drill_down_shows_reply_length_and_the_adjusted_task_score() -> None:
    records = professional_records()
    html = render_report(aggregate_records(records, seed=0, length_adjustment=PRO), records, PRO_RUN)
    # pro-0: a perfect 913-character reply: 1 - 0.0147 * (913 - 2000) / 500 = 1.0319578
    assert records[0]["score"] == 1.0
    assert '<span class="ch">913 ch</span>' in html and "reply 913 characters" in html
    assert "score 1.000 · length-adjusted 1.0320" in html
    assert 'data-s="1.0319578' in html  # the headline per task, which the sort uses
    assert '<span class="ch">3,913 ch</span>' in html


def test_not_official_banner_lists_the_differences() -> None:
    differences = ["grader_model gpt-4.1 (official: gpt-5.4-2026-03-05)", "reasoning_effort medium (official: low)"]
    run = PRO_RUN | {"official_configuration": False, "official_differences": differences}
    records = professional_records()
    html = render_report(aggregate_records(records, seed=0, length_adjustment=PRO), records, run)
    banner = html.split('<div class="banner" role="alert">')[1].split("</div>")[0]
    assert "Not HealthBench Professional's official configuration." in banner
    for difference in differences:
        assert f'<li class="mono">{difference}</li>' in banner
    assert html.index("Not HealthBench") < html.index('<div class="head">')  # above the score, not below


def test_professional_runs_chart_their_four_slice_families() -> None:
    records = professional_records()
    html = render_report(aggregate_records(records, seed=0, length_adjustment=PRO), records, PRO_RUN)
    titles = re.findall(r"<h3>(By [^<]+)</h3>", html)
    assert titles == ["By use case", "By type", "By difficulty", "By specialty"]
    for label in ("consult", "red teaming", "cardiology", "medium"):
        assert f">{label}</text>" in html
    assert "<label>use case <select" in html and "<option>writing</option>" in html
    assert "Slices are of the task scores as graded, without length adjustment." in html


def test_ordinary_runs_chart_theme_axis_and_cluster_only() -> None:
    records = [
        make_record(
            "t1",
            [(5, True, ["axis:accuracy", "cluster:c1"])],
            example_tags=["theme:hedging", "physician_agreed_category:x"],
        ),
        make_record("t2", [(5, False, ["axis:accuracy", "cluster:c1"])], example_tags=["theme:global_health"]),
    ]
    titles = re.findall(r"<h3>(By [^<]+)</h3>", render(records))
    assert titles == ["By theme", "By axis", "By consensus criterion (highest first)"]


def test_rebuild_rescores_with_other_settings_and_says_so(tmp_path: Path) -> None:
    records = professional_records()
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (tmp_path / "results.jsonl").write_text(lines, encoding="utf-8")
    (tmp_path / "run.json").write_text(json.dumps(PRO_RUN), encoding="utf-8")
    official = rebuild(tmp_path, seed=0, length_adjustment=PRO)
    assert official == aggregate_records(records, seed=0, length_adjustment=PRO)
    assert json.loads((tmp_path / "metrics.json").read_text()) == official
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Not HealthBench" not in html and "Rescored" not in html

    other = LengthAdjustment(1000, 0.02)
    metrics = rebuild(tmp_path, seed=0, length_adjustment=other)
    assert metrics["score"] == pytest.approx(sum(other.adjust(r["score"], r["response"]) for r in records) / 3)
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "headline: length-adjusted score, center 1000 characters, 0.02 per 500 characters" in html
    assert "the run was graded with center 2000 characters, 0.0147 per 500 characters" in html
    expected = "length adjustment center 1000 characters, 0.02 per 500 characters (official: center 2000"
    assert expected in html.split('<div class="banner" role="alert">')[1]
    assert json.loads((tmp_path / "run.json").read_text()) == PRO_RUN  # the run's own record is left alone

    plain = rebuild(tmp_path, seed=0, length_adjustment=None)
    assert LENGTH_ADJUSTED not in plain and plain["score"] == plain["overall_score"]
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "headline: score, not length-adjusted" in html and "length adjustment none (official:" in html
