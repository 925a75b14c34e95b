"""`--dry-run`: calls, tokens and live versus batch cost before anything is sent or written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from healthbench.cli import main
from healthbench.data.schema import Message
from healthbench.grading.prompt import TEMPLATE
from healthbench.runs.estimate import Unit, estimate, estimate_report
from healthbench.runs.pricing import Price
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY
from tests.test_baseline import made_up_rows as baseline_rows
from tests.test_metaeval import made_up_meta_rows


def test_estimate_counted_by_hand() -> None:
    hello = [Message(role="user", content="Hi")]  # 4 + 2 + 4 characters of conversation
    guess = estimate([Unit(hello, "Rest.", ["Says rest"]), Unit(hello, None, ["Says rest", "Asks age"])])
    # a given reply counts its 5 characters; a sampled one 500 tokens of 4 characters; the criterion + 8
    given = (len(TEMPLATE) + 10 + 5 + 9 + 8) // 4 + 1 + 20
    sampled = [(len(TEMPLATE) + 10 + 2000 + n + 8) // 4 + 1 + 20 for n in (9, 8)]
    assert guess.grader.calls == 3
    assert guess.grader.prompt_tokens == given + sum(sampled)
    assert guess.grader.completion_tokens == 3 * 60
    assert (guess.policy.calls, guess.policy.prompt_tokens, guess.policy.completion_tokens) == (1, 10 // 4 + 1, 500)

    prices = {"m": Price(input=1.0, cached_input=0.5, output=2.0, batch_output=0.5)}
    report = estimate_report(guess, prices, "m", "unpriced-model")
    grader = report["grader"]
    assert grader["cost_usd"] == pytest.approx((grader["prompt_tokens"] + 2 * 180) / 1e6)
    assert grader["batch_cost_usd"] == pytest.approx((grader["prompt_tokens"] * 0.5 + 0.5 * 180) / 1e6)
    assert report["policy"]["cost_usd"] is None
    assert report["total_cost_usd"] == {"live": None, "batch": None}  # not a total that hides a side
    assert estimate_report(guess, prices, "m", None)["total_cost_usd"]["live"] == grader["cost_usd"]


def dry_run(tmp_path: Path, fake: FakeOpenAI, command: str) -> dict[str, Any]:
    assert fake.base_url
    args = ["--out", str(tmp_path / "out"), "--grader-base-url", fake.base_url, "--dry-run"]
    if command == "grade":
        rows = [make_row(f"p{i}") for i in range(4)]
        replies = [{"prompt_id": r["prompt_id"], "response": "Rest."} for r in rows]
        responses = write_jsonl(tmp_path / "r.jsonl", replies)
        args += ["--data", str(write_jsonl(tmp_path / "rows.jsonl", rows)), "--responses", str(responses)]
    elif command == "baseline":
        args += ["--data", str(write_jsonl(tmp_path / "rows.jsonl", baseline_rows())), "--group", "2", "--references"]
    else:
        args += ["--data", str(write_jsonl(tmp_path / "rows.jsonl", made_up_meta_rows(10)))]
    result = CliRunner().invoke(main, [command, *args], env={"HEALTHBENCH_GRADER_API_KEY": KEY})
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


COMMANDS = [("grade", 4, 8), ("baseline", 24, 48), ("meta-eval", 10, 10)]  # samples and grader calls of each


@pytest.mark.parametrize(("command", "samples", "calls"), COMMANDS)
def test_every_grading_command_estimates_live_and_batch_cost_without_calling(
    tmp_path: Path, fake: FakeOpenAI, command: str, samples: int, calls: int
) -> None:
    guess = dry_run(tmp_path, fake, command)
    assert guess["samples"] == samples and guess["grader"]["calls"] == calls
    assert "policy" not in guess
    assert 0 < guess["total_cost_usd"]["batch"] == pytest.approx(guess["total_cost_usd"]["live"] / 2)
    assert fake.requests_total == 0 and fake.files_uploaded == 0
    assert not (tmp_path / "out").exists()
