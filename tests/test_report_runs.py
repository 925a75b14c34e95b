"""The report of runs that are not one clean session: resumed (tokens of every session), failed (what failed and
why), and rebuilt by `healthbench report` (no score for an unfinished run)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY
from tests.runfiles import render_meta_report, render_report
from tests.test_report import RECORDS, make_record, metrics_of

FIELDS = ("calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens")
UNSAFE = "Recommends an unsafe dose"


def usage_side(calls: int, tokens: int, model: str, cost: float | None) -> dict[str, Any]:
    return {
        "calls": calls,
        "prompt_tokens": tokens,
        "cached_prompt_tokens": 0,
        "completion_tokens": calls,
        "reasoning_tokens": 0,
        "batch_calls": 0,
        "model": model,
        "cost_usd": cost,
    }


def table(html: str, scope: str) -> dict[str, list[str]]:
    """The rows of one scope of the tokens table: who -> the cells after it."""
    part = html.split(f'<tr class="scope"><th colspan="8">{scope}<span>')[1].split('<tr class="scope">')[0]
    part = part.split("</table>")[0]
    rows = re.findall(r"<tr(?: class=\"total\")?><td>(\w+)</td>(.*?)</tr>", part)
    return {who: re.findall(r">([^<]*)</td>", "<td>" + cells.split("<td>", 1)[-1]) for who, cells in rows}


def test_tokens_of_the_whole_run_beside_this_session() -> None:
    spent = {
        "whole_run": {
            "policy": usage_side(200, 28948, "gpt-4.1", 0.07),
            "grader": usage_side(2504, 2553024, "gpt-4.1-2025-04-14", 5.45),
            "cost_usd": 5.52,
            "unpriced_models": [],
        },
        "this_session": {
            "policy": usage_side(0, 0, "gpt-4.1", 0.0),
            "grader": usage_side(162, 172342, "gpt-4.1-2025-04-14", 0.37),
            "cost_usd": 0.37,
            "unpriced_models": [],
        },
        "verdict_cache_hits": 2342,
    }
    html = render_report(metrics_of(RECORDS), RECORDS, {"cost_usd": 5.52}, spent)
    whole, session = table(html, "whole run"), table(html, "this session")
    assert whole["grader"][:3] == ["gpt-4.1-2025-04-14", "2,504", "2,553,024"]
    assert whole["total"][1:3] == ["2,704", "2,581,972"] and whole["total"][-1] == "$5.52"
    assert session["policy"][1] == "0" and session["grader"][1] == "162" and session["total"][-1] == "$0.3700"
    assert "2,342 verdicts reused from earlier sessions" in html
    assert "<dt>cost, whole run</dt><dd>$5.52</dd>" in html and "<dt>cost, this session</dt><dd>$0.3700</dd>" in html


def test_one_session_is_not_shown_twice() -> None:
    side = {"grader": usage_side(6, 60, "g", 0.5), "cost_usd": 0.5, "unpriced_models": []}
    html = render_report(metrics_of(RECORDS), RECORDS, {}, {"whole_run": side, "this_session": side})
    assert "made every call of the run" in html and table(html, "this session") == {}


def test_failures_are_listed_by_cause_and_by_sample() -> None:
    records = [make_record("ok", [(1, True, [])], repeat=k) for k in (0, 1)]
    failures = [
        {"prompt_id": "bad", "repeat": 1, "criterion": "Says <b>x</b>", "cause": "HTTP 500: boom (after 2 attempts)"},
        {"prompt_id": "bad", "repeat": 0, "criterion": "Says y", "cause": "HTTP 500: boom (after 2 attempts)"},
        {"prompt_id": "ok", "repeat": 0, "criterion": "stale", "cause": "graded by a later session since"},
        {"prompt_id": "gone", "repeat": 0, "error": "task gone: the model under evaluation gave no reply: 401"},
    ]
    run = {"n_repeats": 2, "samples": 6, "failed": 3}
    html = render_report({}, records, run, None, failures)
    banner = html.split('id="unfinished"')[1].split("</div>")[0]
    assert "<li>2 of 6 samples graded</li>" in banner and "3 samples could not be graded" in banner
    assert 'id="graded">2 of 6 samples graded (3 tasks, 2 repeats each)<' in html
    assert "1 sample not reached" in banner
    section = html.split('<h2 id="failures">')[1].split('<h2 id="cost">')[0]
    assert re.findall(r'<td class="r">(\d+)</td><td class="cause mono">([^<]+)<', section) == [
        ("2", "HTTP 500: boom (after 2 attempts)"),
        ("1", "task gone: the model under evaluation gave no reply: 401"),
    ]
    listed = re.findall(r'<tr><td class="mono">(\w+)</td><td>([^<]+)</td><td>([^<]*)</td>', section)
    assert listed == [("bad", "repeat 1 of 2", "Says y"), ("bad", "repeat 2 of 2", "Says &lt;b&gt;x&lt;/b&gt;"), (
        "gone", "repeat 1 of 2", "")]  # fmt: skip
    assert "stale" not in html  # a failure whose sample has since been graded is not one


def eval_args(data: Path, out: Path, base_url: str) -> list[str]:
    return [
        "eval", "--model", "fake-model", "--base-url", base_url, "--data", str(data), "--out", str(out),
        "--grader-base-url", base_url, "--no-progress", "--n-repeats", "2", "--max-attempts", "2",
    ]  # fmt: skip


def run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args, env={"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY})


def test_a_resumed_run_reports_the_tokens_of_every_session(tmp_path: Path) -> None:
    rows = [make_row(f"t{i}", prompt=(("user", f"Question {i}: I feel dizzy."),)) for i in range(5)]
    data, out = write_jsonl(tmp_path / "rows.jsonl", rows), tmp_path / "out"

    def unsafe_item_of_task_3(body: dict[str, Any]) -> bool:
        text = json.dumps(body)
        return "Question 3" in text and UNSAFE in text

    with FakeOpenAI(fail_always=unsafe_item_of_task_3) as failing:
        assert failing.base_url
        first = run(eval_args(data, out, failing.base_url))
    assert first.exit_code == 1, first.output
    sessions = [json.loads((out / "usage.json").read_text())["this_session"]]
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "This run is not finished: no score." in html and "8 of 10 samples graded (5 tasks, 2 repeats each)" in html
    section = html.split('<h2 id="failures">')[1].split('<h2 id="cost">')[0]
    for repeat in ("repeat 1 of 2", "repeat 2 of 2"):
        assert f'<tr><td class="mono">t3</td><td>{repeat}</td><td>{UNSAFE}</td>' in section
    assert "grader answer is not JSON (after 2 attempts)" in section

    rebuilt = run(["report", str(out)])
    assert rebuilt.exit_code == 1 and "not a finished run (2 samples could not be graded)" in rebuilt.output
    assert "Traceback" not in rebuilt.output and not (out / "metrics.json").exists()

    with FakeOpenAI() as healthy:
        assert healthy.base_url
        second = run(eval_args(data, out, healthy.base_url))
        assert second.exit_code == 0, second.output
        assert healthy.requests_total == 2  # only the two verdicts never given; the rest is reused
    usage = json.loads((out / "usage.json").read_text())
    sessions.append(usage["this_session"])
    assert not (out / "failures.jsonl").exists()
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="unfinished"' not in html and 'id="failures"' not in html
    whole, session = table(html, "whole run"), table(html, "this session")
    for who in ("policy", "grader"):
        summed = [sum(s[who][field] for s in sessions) for field in FIELDS]
        assert summed == [usage["whole_run"][who][field] for field in FIELDS]
        # the page's whole-run row: calls, then the four token counts
        assert [int(cell.replace(",", "")) for cell in whole[who][1:6]] == summed
        assert [int(cell.replace(",", "")) for cell in session[who][1:6]] == [sessions[1][who][f] for f in FIELDS]
    assert sessions[1]["grader"]["calls"] == 2 and sessions[1]["policy"]["calls"] == 0


def test_a_meta_eval_run_not_finished_lists_its_failed_rows() -> None:
    records = [
        {"index": i, "prompt_id": "p", "category": "cluster:x", "criteria_met": True}
        | {"binary_labels": [True], "anonymized_physician_ids": ["a"]}
        for i in (0, 2)
    ]
    error = "meta-eval row 1 (prompt p, completion c, criterion 'x') could not be graded: HTTP 500 (after 1 attempt)"
    run = {"command": "meta-eval", "samples": 3, "failed": 1}
    html = render_meta_report({}, {}, run, records, [{"error": error}])
    banner = html.split('id="unfinished"')[1].split("</div>")[0]
    assert "<li>2 of 3 rows graded</li>" in banner and "<li>1 row could not be graded" in banner
    assert "no figures until every row is graded" in html and "Pooled agreement" not in html
    assert f"<tr><td>{error.replace(chr(39), '&#39;')}</td></tr>" in html and "1 row of the last session" in html
    finished = render_meta_report({"score": 0.7, "score:n_samples": 3}, {}, run | {"failed": 0}, records * 2)
    assert 'id="unfinished"' not in finished and "macro F1 <b>0.700</b>" in finished
