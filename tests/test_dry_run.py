"""`--dry-run`: calls, tokens, live versus batch cost and the least wall time before anything is sent or written,
as a short summary (or JSON with `--json`); the wall time assumes OpenAI's tier 1 only at OpenAI's endpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from healthbench.cli import main
from healthbench.data.schema import Message
from healthbench.grading.prompt import TEMPLATE
from healthbench.runs.estimate import DEFAULT_LIMITS, Load, Unit, estimate, estimate_report, wall_time
from healthbench.runs.outputs import CostTotals, DryRunEstimate, GraderEstimate
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
    grader = report.grader
    assert grader.cost_usd == pytest.approx((grader.prompt_tokens + 2 * 180) / 1e6)
    assert grader.batch_cost_usd == pytest.approx((grader.prompt_tokens * 0.5 + 0.5 * 180) / 1e6)
    assert report.policy is not None and report.policy.cost_usd is None
    assert (report.total.live, report.total.batch) == (None, None)  # not a total that hides a side
    assert estimate_report(guess, prices, "m", None).total.live == grader.cost_usd


def dry_run(tmp_path: Path, fake: FakeOpenAI, command: str, *extra: str) -> dict[str, Any]:
    assert fake.base_url
    args = ["--out", str(tmp_path / "out"), "--grader-base-url", fake.base_url, "--dry-run", "--json", *extra]
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
    return dict(json.loads(result.stdout))


COMMANDS = [("grade", 4, 8), ("baseline", 24, 48), ("meta-eval", 10, 10)]  # samples and grader calls of each


@pytest.mark.parametrize(("command", "samples", "calls"), COMMANDS)
def test_every_grading_command_estimates_live_and_batch_cost_without_calling(
    tmp_path: Path, fake: FakeOpenAI, command: str, samples: int, calls: int
) -> None:
    guess = dry_run(tmp_path, fake, command)
    assert guess["samples"] == samples and guess["grader"]["calls"] == calls
    assert guess["policy"] is None and guess["version"] == 1
    assert 0 < guess["total_cost_usd"]["batch"] == pytest.approx(guess["total_cost_usd"]["live"] / 2)
    assert fake.requests_total == 0 and fake.files_uploaded == 0
    assert not (tmp_path / "out").exists()
    assert guess["grader"]["base_url"] == fake.base_url
    # The fake's limits are its own: none is assumed for it, so there is no least wall time to give.
    assert guess["wall_time"]["seconds"] is None and guess["wall_time"]["keys"]["grader"]["limits"] == "none known"


def eval_dry_run(tmp_path: Path, *args: str) -> tuple[str, str]:
    """`eval --dry-run` on 10 made-up tasks, nothing reachable needed: its stdout and stderr."""
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row(f"t{i}") for i in range(10)])
    command = ["eval", "--model", "gpt-4.1", "--data", str(data), "--out", str(tmp_path / "out"), "--dry-run", *args]
    result = CliRunner().invoke(main, command, env={"OPENAI_API_KEY": KEY})
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "out").exists()
    return result.stdout, result.stderr


def test_the_summary_says_calls_tokens_cost_time_limits_and_endpoints(tmp_path: Path) -> None:
    local = "http://127.0.0.1:9/v1"  # nothing listens: a dry run sends nothing
    text, _ = eval_dry_run(tmp_path, "--base-url", local)
    figures = json.loads(eval_dry_run(tmp_path, "--base-url", local, "--json")[0])
    lines = text.splitlines()
    assert lines[0] == "dry run (nothing sent, nothing written): 10 samples of 10 tasks"
    policy, grader = figures["policy"], figures["grader"]
    assert lines[1] == (
        f"  policy gpt-4.1 at {local}: 10 calls, {policy['prompt_tokens']:,} prompt and "
        f"{policy['completion_tokens']:,} output tokens; ${policy['cost_usd']:,.2f} live, "
        f"${policy['batch_cost_usd']:,.2f} batch"
    )
    assert lines[2].startswith(f"  grader gpt-4.1-2025-04-14 at https://api.openai.com/v1: {grader['calls']} calls, ")
    cache = grader["prompt_cache"]
    # Replies not sampled yet are each their own: a reply's two items share a start shorter than 1,024 tokens.
    assert cache["assumed_hit_rate"] == 0 and cache["prompt_cache_key"] is True
    assert lines[3] == f"    prompt cache: 0% of prompt tokens assumed cached, $0.00 off the live cost: {cache['rule']}"
    total = figures["total_cost_usd"]
    assert lines[4] == f"  total ${total['live']:,.2f} live, ${total['batch']:,.2f} batch"
    # The grader's key is at OpenAI (tier 1 assumed, and said); the model's at a loopback server (none assumed).
    assert lines[5] == f"least wall time {figures['wall_time']['seconds'] / 60:.1f} min (the slowest key's):"
    assert lines[6].startswith("  grader key at https://api.openai.com/v1: ")
    assert "at 500 RPM and 30,000 TPM (OpenAI usage tier 1 for gpt-4.1, assumed), TPM-bound" in lines[6]
    assert lines[7] == f"  policy key at {local}: no rate limit known, so none assumed (give --rpm/--tpm)"
    assert lines[8] == "(--json prints these figures as JSON)" and len(lines) == 9
    assert figures["wall_time"]["keys"]["policy"]["seconds"] is None
    assert figures["wall_time"]["seconds"] == figures["wall_time"]["keys"]["grader"]["seconds"] > 0


def test_given_limits_are_used_at_any_endpoint(tmp_path: Path) -> None:
    local = "http://127.0.0.1:9/v1"
    text, _ = eval_dry_run(tmp_path, "--base-url", local, "--grader-base-url", local, "--grader-rpm", "60")
    assert "least wall time 30.0 s:" in text  # 10 policy and 20 grader calls on one key, at 60 a minute
    assert f"  grader+policy key at {local}: 30.0 s at 60 RPM (given), RPM-bound" in text
    unknown, _ = eval_dry_run(tmp_path, "--base-url", local, "--grader-base-url", local)
    assert "least wall time unknown:" in unknown
    assert "no rate limit known, so none assumed (give --grader-rpm/--grader-tpm or --rpm/--tpm)" in unknown


def test_wall_time_by_key_and_endpoint() -> None:
    loads = {
        "grader": Load("a", calls=500, tokens=0, base_url="https://api.openai.com/v1"),
        "policy": Load("b", calls=10, tokens=0, base_url="http://localhost:8000/v1"),
    }
    wall = wall_time(loads)
    assert wall.keys["grader"].limits == DEFAULT_LIMITS and wall.keys["grader"].seconds == 60.0  # 500 at 500 RPM
    assert wall.keys["policy"].model_dump() == {
        "seconds": None,
        "binding": None,
        "rpm": None,
        "tpm": None,
        "limits": "none known",
        "base_url": "http://localhost:8000/v1",
    }
    assert wall.seconds == 60.0
    assert wall_time({"policy": loads["policy"]}).seconds is None


def test_json_only_with_dry_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("a")])
    args = ["eval", "--model", "m", "--data", str(data), "--out", str(tmp_path / "out"), "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "--json goes with --dry-run" in result.output


def test_the_json_is_its_record_and_the_wall_time_keeps_keys_apart_from_seconds() -> None:
    loads = {"grader": Load("a", calls=500, tokens=0), "policy": Load("a", calls=100, tokens=0)}
    wall = wall_time(loads)
    # One key for both sides: their calls add up under its limits; `seconds` is never one of the keys.
    assert list(wall.keys) == ["grader+policy"] and wall.seconds == wall.keys["grader+policy"].seconds == 72.0
    written = DryRunEstimate(
        samples=3, grader=GraderEstimate(model="m"), total_cost_usd=CostTotals(), wall_time=wall
    ).model_dump(mode="json")
    assert DryRunEstimate.model_validate(written).model_dump(mode="json") == written
    with pytest.raises(ValidationError, match="the dry run's JSON of version 2, which this release does not read"):
        DryRunEstimate.model_validate(written | {"version": 2})
