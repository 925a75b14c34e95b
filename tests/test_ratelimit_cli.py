"""Rate limits and quota through the commands: a run that meets an empty account stops, and resumes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from healthbench.api.client import ApiClient
from healthbench.api.wire import Usage
from healthbench.runs.pricing import CostMeter
from healthbench.runs.session import status_line
from healthbench.testing import FakeOpenAI
from healthbench.testing.limits import RateLimits
from tests.conftest import make_row, write_jsonl
from tests.test_eval import run_eval


def rows(n: int) -> list[dict[str, Any]]:
    return [make_row(f"q{i:03d}", prompt=(("user", f"Question {i}: my knee hurts."),)) for i in range(n)]


def test_a_run_without_quota_stops_and_the_same_command_later_finishes_it(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows(20))  # 20 policy calls and 40 grader calls
    with FakeOpenAI(limits=RateLimits(quota=25)) as server:
        assert server.base_url
        stopped = run_eval(data, tmp_path / "out", server.base_url)
        refused = server.responses_by_kind["quota_exhausted"]
    assert stopped.exit_code == 1
    assert "the account has no quota left" in stopped.output
    assert "run the same command again" in stopped.output
    assert not (tmp_path / "out" / "metrics.json").exists()
    # At most what was in flight when the first refusal came back (the policy's 32 and the grader's 64): none
    # is retried and nothing new starts.
    assert 1 <= refused <= 32 + 64
    with FakeOpenAI() as server:
        assert server.base_url
        resumed = run_eval(data, tmp_path / "out", server.base_url)
        asked_again = server.requests_total
        assert resumed.exit_code == 0, resumed.output
        clean = run_eval(data, tmp_path / "clean", server.base_url)
        assert clean.exit_code == 0, clean.output
    assert asked_again == 60 - 25  # what was out when the quota ran out landed in the store: nothing is paid twice
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics == json.loads((tmp_path / "clean" / "metrics.json").read_text())


def test_dry_run_estimates_the_wall_time_at_the_given_or_default_limits(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows(20))  # 60 calls on one key: the grader's is the model's
    given = run_eval(data, tmp_path / "out", "http://127.0.0.1:9/v1", "--dry-run", "--json", "--grader-rpm", "30")
    assert given.exit_code == 0, given.output
    wall = json.loads(given.output)["wall_time"]
    assert wall["seconds"] == 120.0 and wall["keys"]["grader+policy"]["binding"] == "RPM"
    # OpenAI's own endpoint (nothing is sent in a dry run): its tier 1 limits are assumed.
    assumed = run_eval(data, tmp_path / "out", "https://api.openai.com/v1", "--dry-run", "--json")
    report = json.loads(assumed.output)
    side = report["wall_time"]["keys"]["grader+policy"]
    assert side["limits"].startswith("default") and side["binding"] == "TPM"
    tokens = sum(report[s]["prompt_tokens"] for s in ("grader", "policy")) + 40 * 2048 + 20 * 4096
    assert side["seconds"] == round(tokens / 30_000 * 60, 1)
    # Any other endpoint's limits are its own: none is assumed.
    unknown = json.loads(run_eval(data, tmp_path / "out", "http://127.0.0.1:9/v1", "--dry-run", "--json").output)
    assert (
        unknown["wall_time"]["seconds"] is None
        and unknown["wall_time"]["keys"]["grader+policy"]["limits"] == "none known"
    )
    assert not (tmp_path / "out").exists()


def test_the_progress_bar_shows_the_cost_and_each_key_pace() -> None:
    line = status_line(CostMeter(None, "gpt-4.1", None), {"grader": ApiClient("http://127.0.0.1:9/v1", "sk-bar")})
    assert line(Usage(), Usage()) == "answered 0 calls/s, $0.00 so far; started grader: 0 req/s"
