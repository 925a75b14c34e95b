"""A setting is sent, or refused with the way out, never dropped on the way: a reasoning effort for a model not
treated as a reasoning model, batch flags without `--batch`; run.json records what was sent. A command whose
extra is not installed says which to install, and SIGTERM outside a run stops as Ctrl-C does."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pydantic import ValidationError

from healthbench.cli import main
from healthbench.runs.folder import RunFolder
from healthbench.runs.policy import PolicyConfig
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY

ENV = {"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY}


def run_eval(tmp_path: Path, url: str, *extra: str) -> Result:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("t1"), make_row("t2")])
    args = ["eval", "--model", "my-local-llama", "--base-url", url, "--grader-base-url", url, "--data", str(data)]
    return CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out"), "--no-progress", *extra], env=ENV)


def test_a_reasoning_effort_for_a_model_not_known_to_reason_is_refused_with_the_way_out(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    result = run_eval(tmp_path, fake.base_url or "", "--reasoning-effort", "high")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: my-local-llama is not treated as a reasoning model, so it takes no reasoning effort: drop "
        "--reasoning-effort, or set --reasoning if it is one"
    )
    assert fake.requests_total == 0 and not (tmp_path / "out").exists()
    # The library says it in its settings, which the command turned into its flags.
    with pytest.raises(ValidationError, match="drop `reasoning_effort`, or set `reasoning=True`"):
        PolicyConfig(model="my-local-llama", reasoning_effort="high")


def test_with_reasoning_the_effort_is_sent_and_run_json_records_what_was_sent(tmp_path: Path) -> None:
    with FakeOpenAI(strict_params=False) as server:
        result = run_eval(tmp_path, server.base_url or "", "--reasoning-effort", "high", "--reasoning")
        assert result.exit_code == 0, result.output
        policy_bodies = [body for body in server.bodies if body["model"] == "my-local-llama"]
    assert len(policy_bodies) == 2
    assert all(body["reasoning_effort"] == "high" and "temperature" not in body for body in policy_bodies)
    run = RunFolder(tmp_path / "out").read_run()
    assert run is not None and run.spec.policy is not None
    assert (run.spec.policy.reasoning, run.spec.policy.reasoning_effort) == (True, "high")


def test_a_chat_model_left_alone_is_sent_no_effort_and_recorded_with_none(tmp_path: Path, fake: FakeOpenAI) -> None:
    result = run_eval(tmp_path, fake.base_url or "", "--temperature", "0.7")
    assert result.exit_code == 0, result.output
    policy_bodies = [body for body in fake.bodies if body["model"] == "my-local-llama"]
    assert policy_bodies and all(
        "reasoning_effort" not in body and body["temperature"] == 0.7 for body in policy_bodies
    )
    run = RunFolder(tmp_path / "out").read_run()
    assert run is not None and run.spec.policy is not None
    assert (run.spec.policy.reasoning, run.spec.policy.reasoning_effort, run.spec.policy.temperature) == (
        False,
        None,
        0.7,
    )


@pytest.mark.parametrize("flag", [("--poll-interval", "5"), ("--batch-tokens", "1000"), ("--no-wait",)])
def test_batch_flags_without_batch_are_refused(tmp_path: Path, fake: FakeOpenAI, flag: tuple[str, ...]) -> None:
    result = run_eval(tmp_path, fake.base_url or "", *flag)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == f"Error: {flag[0]} needs --batch"
    assert fake.requests_total == 0


def test_serve_without_its_extra_says_which_to_install(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row("t1")])
    # fastapi as it is where the package was installed without `[serve]`: not importable.
    code = "import sys; sys.modules['fastapi'] = None; from healthbench.cli import main; sys.argv[0] = 'healthbench'; "
    code += "main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "serve", "--data", str(data), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "Error: serve needs the package's serve extra, and fastapi is not installed: pip install -e '.[serve]' in the "
        "clone (bash scripts/dev serve sets it up)"
    ]


def test_sigterm_outside_a_run_is_one_line_and_exit_143(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def terminated(*args: Any, **kwargs: Any) -> None:
        signal.raise_signal(signal.SIGTERM)  # as docker stop arrives while the data loads, before the run's loop

    monkeypatch.setattr("healthbench.cli.execute.run_session", terminated)
    before = signal.getsignal(signal.SIGTERM)
    result = run_eval(tmp_path, "http://127.0.0.1:9/v1")
    assert result.exit_code == 143
    assert (
        result.output.strip() == "healthbench: stopped by SIGTERM; a run keeps every answer that arrived in its store"
    )
    assert signal.getsignal(signal.SIGTERM) is before  # the command's handler is gone with it
