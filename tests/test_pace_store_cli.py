"""The shared pace and the in-flight budget through the settings and the commands: `--pace-store` and
`HEALTHBENCH_PACE_STORE` on the commands that call a model, a store out of reach refused before anything is sent,
and budgets that follow the limit unless a concurrency is given."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis as redis_client
from click.testing import CliRunner

from healthbench.api.client import ApiClient
from healthbench.api.endpoint import MAX_IN_FLIGHT
from healthbench.api.keygates import key_slot
from healthbench.cli import main
from healthbench.grading.settings import GraderConfig
from healthbench.runs.policy import PolicyConfig
from healthbench.testing import FakeOpenAI
from healthbench.testing.limits import RateLimits
from tests.conftest import make_row, write_jsonl
from tests.redisserver import RedisServer, needs_redis
from tests.reference import KEY
from tests.test_eval import run_eval
from tests.test_metaeval import made_up_meta_rows


def _rows(tmp_path: Path, n: int = 6) -> Path:
    rows = [make_row(f"q{i}", prompt=(("user", f"Question {i}: a rash after hiking."),)) for i in range(n)]
    return write_jsonl(tmp_path / "rows.jsonl", rows)


def test_a_given_concurrency_is_a_ceiling_and_a_default_one_follows_the_limit() -> None:
    assert GraderConfig().max_concurrency == MAX_IN_FLIGHT and GraderConfig().concurrency == 64
    assert GraderConfig(concurrency=10).max_concurrency is None
    assert PolicyConfig(model="m", concurrency=10, max_concurrency=50).max_concurrency == 50
    assert GraderConfig(concurrency=10).client().ceiling == 10
    with pytest.raises(ValueError, match="database must be a number"):
        GraderConfig(pace_store="redis://127.0.0.1:6379/pace")


@pytest.mark.parametrize("ceiling", [None, 100])
def test_the_budget_grows_to_what_the_limit_and_the_latency_need(ceiling: int | None) -> None:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    # A thousand a second at 0.1 s each want 150 in flight: a budget of 8 that may grow to 100 reaches its ceiling.
    with FakeOpenAI(limits=RateLimits(rpm=60_000), latency=0.1, record=False) as server:
        assert server.base_url
        client = ApiClient(server.base_url, f"sk-budget-{ceiling}", concurrency=8, max_concurrency=ceiling)

        async def run() -> None:
            await asyncio.gather(*(client.complete(body, str) for _ in range(200)))
            await client.aclose()

        asyncio.run(run())
        most = server.max_in_flight
    assert most == 8 if ceiling is None else 8 < most <= ceiling


def test_a_pace_store_out_of_reach_stops_the_run_before_anything_is_sent(tmp_path: Path) -> None:
    data = _rows(tmp_path)
    with FakeOpenAI() as server:
        assert server.base_url
        result = run_eval(data, tmp_path / "out", server.base_url, "--pace-store", "redis://:pw@127.0.0.1:9/0")
        sent = server.requests_total
    assert result.exit_code == 1 and sent == 0
    assert "pace store redis://:***@127.0.0.1:9/0 cannot be reached" in result.output and "pw" not in result.output


@pytest.mark.parametrize("command", ["grade", "baseline", "meta-eval"])
def test_every_grading_command_checks_its_pace_store_first(tmp_path: Path, command: str) -> None:
    ideal = {"ideal_completion": "Rest.", "ideal_completions_group": "Group 1", "ideal_completions_ref_completions": []}
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("q0", ideal=ideal)])
    inputs = {
        "grade": [
            "--data",
            str(data),
            "--responses",
            str(write_jsonl(tmp_path / "r.jsonl", [{"prompt_id": "q0", "response": "Rest."}])),
        ],
        "baseline": ["--data", str(data), "--group", "1"],
        "meta-eval": ["--data", str(write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(2)))],
    }[command]
    with FakeOpenAI() as server:
        assert server.base_url
        args = [command, *inputs, "--out", str(tmp_path / "out"), "--grader-base-url", server.base_url, "--no-progress"]
        result = CliRunner().invoke(
            main, [*args, "--pace-store", "redis://127.0.0.1:9/0"], env={"HEALTHBENCH_GRADER_API_KEY": KEY}
        )
        sent = server.requests_total
    assert result.exit_code == 1 and sent == 0, result.output
    assert "pace store redis://127.0.0.1:9/0 cannot be reached" in result.output


def test_serve_refuses_to_start_without_its_pace_store(tmp_path: Path) -> None:
    data = _rows(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "healthbench", "serve", "--data", str(data), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HEALTHBENCH_PACE_STORE": "redis://127.0.0.1:9/0", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1 and "pace store redis://127.0.0.1:9/0 cannot be reached" in done.stderr


@needs_redis
@pytest.mark.parametrize("how", ["flag", "environment"])
def test_eval_shares_its_pace_through_the_store(tmp_path: Path, redis: RedisServer, how: str) -> None:
    data = _rows(tmp_path)
    extra, env = (("--pace-store", redis.url), {}) if how == "flag" else ((), {"HEALTHBENCH_PACE_STORE": redis.url})
    with FakeOpenAI(limits=RateLimits(rpm=6000)) as server:
        assert server.base_url
        result = run_eval(data, tmp_path / "out", server.base_url, *extra, env=env)
        slot = key_slot(server.base_url, KEY)
    assert result.exit_code == 0, result.output
    shared = redis_client.Redis.from_url(redis.url, decode_responses=True)
    # The policy and the grader (one key) learned the limit from the headers, and left it for the other processes.
    assert float(shared.hget(f"healthbench:pace:{{{slot}}}", "rpm") or 0) == 6000
    shared.close()
