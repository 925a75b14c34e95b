"""The HTML report, rendered from made-up runs."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from healthbench.report import render_report, write_report
from healthbench.scoring import aggregate, task_metrics

XSS = "<script>alert(1)</script>"
RUN = {
    "grader_model": "made-up-grader-1",
    "template_sha256": "f" * 64,
    "seed": 0,
    "tasks": 3,
    "usage": {"calls": 12, "prompt_tokens": 123456, "cached_prompt_tokens": 0, "completion_tokens": 789},
    "cost_usd": 1.234,
}


def make_record(
    prompt_id: str,
    items: Sequence[tuple[int, bool, Sequence[str]]],
    *,
    theme: str = "hedging",
    response: str = "Drink water and rest.",
    repeat: int | None = None,
) -> dict[str, Any]:
    """A results.jsonl record from (points, met, tags) items, scored by the real scoring code."""
    example_tags = [f"theme:{theme}"]
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
    for fact in ("made-up-grader-1", "f" * 64, "123,456", "$1.23", "3 tasks graded"):
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


def test_repeats_are_shown_and_incomplete_runs_have_no_score() -> None:
    records = [make_record("r", [(1, True, [])], repeat=0), make_record("r", [(1, False, [])], repeat=1)]
    html = render_report({}, records, {})
    assert "No score" in html and "#1" in html
    assert html.count('data-id="r"') == 2


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
    assert "No score" in html and "task-a" in html


def test_spending_per_side_with_the_batch_share() -> None:
    spent = {
        "whole_run": {
            "policy": {"calls": 0, "batch_calls": 0, "model": "idle", "cost_usd": 0.0},
            "grader": {"calls": 5962, "batch_calls": 5900, "model": "gpt-4.1-2025-04-14", "cost_usd": 6.7},
        }
    }
    html = render_report(metrics_of(RECORDS), RECORDS, RUN, spent)
    row = re.search(r"<tr><td>grader</td>(.*?)</tr>", html.split("spent (whole run)")[1])
    assert row is not None
    assert re.findall(r">([^<]+)<", row.group(1)) == ["gpt-4.1-2025-04-14", "5,962", "5,900", "$6.70"]
    assert "idle" not in html  # a side that made no calls is not listed
    assert "in batches" not in render()
