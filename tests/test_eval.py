"""`healthbench eval` end to end, with the fake endpoint playing both the policy and the grader."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.testing import FakeOpenAI, policy_reply
from tests.conftest import numbered_rows, write_jsonl
from tests.interrupting import set_after
from tests.reference import KEY, check_against_reference, sent_prompts

SYSTEM = "You are a helpful assistant."


def eval_args(data: Path, out: Path, base_url: str, *extra: str, grader_url: str | None = None) -> list[str]:
    """`healthbench eval` of fake-model at `base_url` on `data` into `out`, graded at `grader_url` (None: at
    `base_url` too)."""
    grader = base_url if grader_url is None else grader_url
    return [
        "eval", "--model", "fake-model", "--base-url", base_url, "--data", str(data), "--out", str(out),
        "--grader-base-url", grader, "--no-progress", *extra,
    ]  # fmt: skip


def run_eval(data: Path, out: Path, base_url: str, *extra: str, env: dict[str, str] | None = None) -> Result:
    """`eval_args` run, with the key for policy and grader and `env` in the environment."""
    keys = {"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY}
    return CliRunner().invoke(main, eval_args(data, out, base_url, *extra), env={**keys, **(env or {})})


def expected_replies(task_rows: list[dict[str, Any]], system: str | None) -> dict[str, str]:
    head = [{"role": "system", "content": system}] if system else []
    return {r["prompt_id"]: policy_reply(head + r["prompt"]) for r in task_rows}


def test_eval_matches_the_reference_with_a_system_message(tmp_path: Path, fake: FakeOpenAI) -> None:
    task_rows = numbered_rows(12)
    data = write_jsonl(tmp_path / "rows.jsonl", task_rows)
    assert fake.base_url
    extra = ("--system-message", SYSTEM, "--temperature", "0.5", "--max-tokens", "2048")
    result = run_eval(data, tmp_path / "out", fake.base_url, *extra)
    assert result.exit_code == 0, result.output
    policy_bodies = [b for b in fake.bodies if b["model"] == "fake-model"]
    assert len(policy_bodies) == 12
    assert all(b["temperature"] == 0.5 and b["max_tokens"] == 2048 for b in policy_bodies)
    assert all(b["messages"][0] == {"role": "system", "content": SYSTEM} for b in policy_bodies)
    # the reference grades the transcript it sent, system message first
    with_system = [r | {"prompt": [{"role": "system", "content": SYSTEM}, *r["prompt"]]} for r in task_rows]
    replies = expected_replies(task_rows, SYSTEM)
    grader_prompts = sent_prompts(fake)
    del grader_prompts[next(iter(grader_prompts))]  # not needed: compare grader prompts only
    expected = check_against_reference(tmp_path / "out", with_system, replies)
    assert {p: c for p, c in sent_prompts(fake).items() if "# Rubric item" in p} == expected
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().split("\n")[:-1]]
    assert {r["prompt_id"]: r["response"] for r in results} == replies
    assert all(r["prompt"][0]["role"] == "system" and r["policy_model"] == "fake-model" for r in results)
    report = (tmp_path / "out" / "report.html").read_text()
    assert "t000" in report and "<html" in report.lower()
    usage = json.loads((tmp_path / "out" / "usage.json").read_text())
    assert usage["whole_run"]["policy"]["calls"] == 12 and usage["whole_run"]["grader"]["calls"] == 24
    assert usage["whole_run"]["unpriced_models"] == ["fake-model"] and usage["whole_run"]["cost_usd"] > 0
    assert "(+ fake-model: no price)" in result.output
    for path in (tmp_path / "out").iterdir():
        assert KEY.encode() not in path.read_bytes()


def test_limit_picks_tasks_as_the_reference_does(tmp_path: Path, fake: FakeOpenAI) -> None:
    import random

    task_rows = numbered_rows(30)
    data = write_jsonl(tmp_path / "rows.jsonl", task_rows)
    assert fake.base_url
    result = run_eval(data, tmp_path / "out", fake.base_url, "--limit", "7", "--n-repeats", "2")
    assert result.exit_code == 0, result.output
    chosen = {r["prompt_id"] for r in random.Random(0).sample(task_rows, 7)}
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().split("\n")[:-1]]
    assert {(r["prompt_id"], r["repeat"]) for r in results} == {(p, k) for p in chosen for k in (0, 1)}
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["score:n_samples"] == 14
    # The fake model answers both repeats alike; each repeat is still graded by calls of its own, as the
    # reference grades it, so the grader's own variation is in the pooled samples.
    assert fake.requests_total == 14 + 14 * 2
    assert json.loads((tmp_path / "out" / "usage.json").read_text())["whole_run"]["grader"]["calls"] == 28


def test_rerun_is_free_and_changed_settings_are_refused(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(5))
    assert fake.base_url
    assert run_eval(data, tmp_path / "out", fake.base_url, "--temperature", "0.5").exit_code == 0
    first = (tmp_path / "out" / "metrics.json").read_bytes()
    fake.reset()
    again = run_eval(data, tmp_path / "out", fake.base_url, "--temperature", "0.5")
    assert again.exit_code == 0, again.output
    assert fake.requests_total == 0
    assert "0 calls this session (10 verdicts reused)" in again.output
    assert (tmp_path / "out" / "metrics.json").read_bytes() == first
    changed = run_eval(data, tmp_path / "out", fake.base_url, "--temperature", "0.7")
    assert changed.exit_code == 1
    assert "other settings (temperature: 0.5 -> 0.7)" in changed.output
    assert fake.requests_total == 0
    assert (tmp_path / "out" / "metrics.json").read_bytes() == first


def test_resume_after_sigkill_pays_only_for_calls_in_flight(tmp_path: Path) -> None:
    task_rows = numbered_rows(40)
    data = write_jsonl(tmp_path / "rows.jsonl", task_rows)
    halfway, count = set_after(60)
    with FakeOpenAI(respond=count, latency=0.01) as server:
        assert server.base_url
        args = eval_args(data, tmp_path / "killed", server.base_url, "--concurrency", "4", "--policy-concurrency", "4")
        env = {**os.environ, "OPENAI_API_KEY": KEY}
        process = subprocess.Popen([sys.executable, "-m", "healthbench", *args], env=env, stderr=subprocess.DEVNULL)
        assert halfway.wait(timeout=60)
        process.send_signal(signal.SIGKILL)
        process.wait()
        before = server.requests_total
    assert before < 120  # killed before the end: 40 replies and 80 verdicts
    with FakeOpenAI() as server:
        assert server.base_url
        resumed = run_eval(
            data, tmp_path / "killed", server.base_url, "--concurrency", "4", "--policy-concurrency", "4"
        )
        assert resumed.exit_code == 0, resumed.output
        after = server.requests_total
    with FakeOpenAI() as server:
        assert server.base_url
        assert run_eval(data, tmp_path / "clean", server.base_url).exit_code == 0
        clean = server.requests_total
    assert clean == 120
    assert before + after <= clean + 8  # at most the calls in flight at the kill are paid twice
    assert (tmp_path / "killed" / "metrics.json").read_bytes() == (tmp_path / "clean" / "metrics.json").read_bytes()


def test_rate_limited_endpoint_is_finished_and_paced(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(40))
    with FakeOpenAI(rate_limit=40, latency=0.05) as server:
        assert server.base_url
        result = run_eval(data, tmp_path / "out", server.base_url)
        assert result.exit_code == 0, result.output
        assert server.responses_by_kind["ok"] == 120
        # The first answer's x-ratelimit headers give the limit, so the run is paced before it can overrun it;
        # the steady state is what benchmarks/bench_ratelimit.py measures.
        assert server.responses_by_kind["rate_limited"] <= 2


def test_model_that_never_answers_fails_the_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(2))
    result = CliRunner().invoke(main, eval_args(data, tmp_path / "out", "http://127.0.0.1:9/v1", "--max-attempts", "1"))
    assert result.exit_code == 1
    # Nothing listens there: the run stops at once, in one line (more in test_fail_fast).
    assert "stopped, the model's endpoint http://127.0.0.1:9/v1 cannot be reached" in result.output
    assert "task t000" not in result.output
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_dry_run_estimates_without_calling(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(10))
    assert fake.base_url
    result = run_eval(data, tmp_path / "out", fake.base_url, "--dry-run", "--json", "--n-repeats", "3")
    assert result.exit_code == 0, result.output
    estimate = json.loads(result.output)
    assert estimate["samples"] == 30 and estimate["policy"]["calls"] == 30 and estimate["grader"]["calls"] == 60
    assert estimate["policy"]["cost_usd"] is None  # the fake model has no price
    assert 0 < estimate["grader"]["batch_cost_usd"] == estimate["grader"]["cost_usd"] / 2
    assert fake.requests_total == 0
    assert not (tmp_path / "out").exists()
