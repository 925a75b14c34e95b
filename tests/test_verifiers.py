"""The verifiers environment end to end: `vf-eval healthbench` (verifiers' own CLI, in process) runs each task's
rollout through verifiers' interception server to the loopback fake, the reward is graded by this project's
grader on the same fake, and every reward equals `healthbench grade` on the same replies.

The rollouts run the harness `vf-eval` uses by default, the shipped `null` harness: its chat program, a uv
script, in a process of its own. uv would fetch itself and the script's packages from the network on first use;
`scripts/dev test` puts uv in this venv and the packages' wheels in `<venv>/wheelhouse`, and the tests point uv
there, offline. Fifty sample tasks use a harness defined here instead, which sends the task's messages to the
interception endpoint once, in process (the same exchange, without fifty interpreter start-ups).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytest.importorskip("verifiers.v1")

import verifiers.v1 as vf  # type: ignore[import-untyped, import-not-found, unused-ignore]
from verifiers.v1.cli.eval.main import main as vf_eval  # type: ignore[import-untyped, import-not-found, unused-ignore]
from verifiers.v1.utils.loaders import environment_class, taskset_class  # type: ignore[import-untyped, import-not-found, unused-ignore]

import healthbench
from healthbench.errors import SettingsError
from healthbench.grading.official import PROFESSIONAL_GRADER
from healthbench.grading.scoring import PROFESSIONAL_LENGTH_ADJUSTMENT
from healthbench.integrations.verifiers_env import HealthBenchEnv, HealthBenchTaskConfig, HealthBenchTaskset
from healthbench.testing import GRADER_MARKER, FakeOpenAI
from tests.conftest import write_jsonl
from tests.reference import KEY, made_up_rows
from tests.test_grade_cli import grade

HARNESS = "healthbench_test_loopback_harness"
WHEELS = Path(sys.prefix) / "wheelhouse"


class LoopbackHarnessConfig(vf.HarnessConfig):  # type: ignore[misc]
    pass


class LoopbackHarness(vf.Harness[LoopbackHarnessConfig]):  # type: ignore[misc]
    """One chat completion for the task's messages, sent to the rollout's interception endpoint."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
        tool_interception_url: str | None = None,
    ) -> Any:
        system, prompt = self.resolve_prompt(data)
        messages = [message.model_dump() for message in prompt]
        if system:
            messages.insert(0, {"role": "system", "content": system})
        body = {"model": ctx.model, "messages": messages}
        headers = {"Authorization": f"Bearer {secret}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(endpoint.rstrip("/") + "/chat/completions", json=body, headers=headers) as response,
        ):
            await response.read()
            code = 0 if response.status == 200 else 1
        return vf.ProgramResult(exit_code=code, stdout="", stderr="")


@pytest.fixture(autouse=True)
def _setting(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType(HARNESS)
    module.__dict__.update(LoopbackHarness=LoopbackHarness, __all__=["LoopbackHarness"])
    monkeypatch.setitem(sys.modules, HARNESS, module)
    monkeypatch.setenv("FAKE_API_KEY", "sk-policy-0123456789")
    monkeypatch.setenv("HEALTHBENCH_GRADER_API_KEY", KEY)
    monkeypatch.delenv("HEALTHBENCH_GRADER_BASE_URL", raising=False)
    monkeypatch.delenv("HEALTHBENCH_GRADER_MODEL", raising=False)
    monkeypatch.delenv("VF_RUN_ID", raising=False)  # vf-eval sets it for the processes it starts
    monkeypatch.setattr(sys, "argv", list(sys.argv))


@pytest.fixture
def shipped_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    """The null harness's uv, and its chat program's packages, from this venv: no network."""
    uv = Path(sys.executable).parent / "uv"
    if not uv.is_file() or not (WHEELS / ".done").is_file():
        pytest.skip(f"no uv or no {WHEELS} beside {sys.executable}: `bash scripts/dev test` provides them")
    monkeypatch.setenv("PATH", f"{uv.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(WHEELS))
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "never")
    assert shutil.which("uv") == str(uv)


def run(tmp: Path, fake: FakeOpenAI, *options: str, harness: str = "null") -> list[dict[str, Any]]:
    """`vf-eval healthbench ...` with policy and grader on the fake, the rollouts by `harness` (the default one,
    unless the stand-in is named); the one trace of each episode."""
    assert fake.base_url
    out = tmp / "vf"
    vf_eval(
        [
            *("healthbench", "--env.taskset.task.grader-base-url", fake.base_url, *options),
            *("--env.agent.harness.id", harness, "--model", "policy"),
            *("--client.base-url", fake.base_url, "--client.api-key-var", "FAKE_API_KEY"),
            *("--no-rich", "--no-push", "--output-dir", str(out)),
        ]
    )
    (traces,) = out.glob("*/traces.jsonl")
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    episodes = [json.loads(line) for line in traces.read_text().split("\n") if line]
    return [trace for episode in episodes for trace in episode["traces"]]


def check_against_grade(tmp: Path, data: Path, traces: list[dict[str, Any]], base_url: str) -> None:
    replies = {}
    for trace in traces:
        assert trace["ok"], trace["errors"]
        (reply,) = [node["message"] for node in trace["nodes"] if node["sampled"]]
        assert reply["role"] == "assistant" and reply["content"] == trace["info"]["healthbench"]["response"]
        replies[trace["task"]["data"]["id"]] = reply["content"]
    responses = write_jsonl(tmp / "responses.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    result = grade(tmp, data, responses, "grade", base_url)
    assert result.exit_code == 0, result.output
    lines = (tmp / "grade" / "results.jsonl").read_text().split("\n")[:-1]
    expected = {r["prompt_id"]: r for r in map(json.loads, lines)}
    assert len(expected) == len(traces)
    for trace in traces:
        graded = expected[trace["task"]["data"]["id"]]
        assert trace["rewards"]["healthbench"]["score"] == pytest.approx(graded["score"], abs=1e-9)
        assert trace["info"]["healthbench"]["rubric_items"] == graded["rubric_items"]


@pytest.mark.usefixtures("shipped_harness")
def test_vf_eval_rewards_equal_healthbench_grade(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()[:8]  # each rollout of the shipped harness starts an interpreter: a few, the multi-turn one
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    traces = run(tmp_path, fake, "--env.taskset.data", str(data))
    assert len(traces) == len(rows)
    policy = [b for b in fake.bodies if GRADER_MARKER not in b["messages"][-1]["content"]]
    multi = next(b for b in policy if b["messages"][-1]["content"] == "Two.")
    # The policy got the role-tagged conversation, as the row gives it.
    assert [(m["role"], m["content"]) for m in multi["messages"]] == [
        (m["role"], m["content"]) for m in rows[1]["prompt"]
    ]
    assert len(policy) == len(rows) and fake.base_url
    assert all(b.get("stream") is True for b in policy)  # the shipped chat program streams; the stand-in does not
    check_against_grade(tmp_path, data, traces, fake.base_url)
    assert any(t["rewards"]["healthbench"]["score"] < 1 for t in traces)


def test_fifty_sample_tasks_reward_as_grade_does(tmp_path: Path, sample_path: Path, fake: FakeOpenAI) -> None:
    traces = run(tmp_path, fake, "--env.taskset.data", str(sample_path), "--env.taskset.limit", "50", harness=HARNESS)
    assert len(traces) == 50
    assert fake.base_url
    check_against_grade(tmp_path, sample_path, traces, fake.base_url)


@pytest.mark.usefixtures("shipped_harness")
def test_length_adjusted_rewards_are_unclipped(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows()[:4])
    adjust = ("--env.taskset.task.length-adjustment-center", "2000")
    penalty = ("--env.taskset.task.length-adjustment-penalty-per-500-chars", "0.5")
    traces = run(tmp_path, fake, "--env.taskset.data", str(data), *adjust, *penalty)
    for trace in traces:
        record = trace["info"]["healthbench"]
        expected = record["score"] - 0.5 * (len(record["response"]) - 2000) / 500
        assert trace["rewards"]["healthbench"]["score"] == pytest.approx(expected, abs=1e-12)
        assert expected > 1  # a short reply gains past 1: nothing is clipped


@pytest.mark.usefixtures("shipped_harness")
def test_a_grader_that_never_answers_fails_the_rollouts(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows()[:3])

    def grader_request(body: dict[str, Any]) -> bool:
        return GRADER_MARKER in body["messages"][-1]["content"]

    with FakeOpenAI(fail_always=grader_request) as fake:
        traces = run(tmp_path, fake, "--env.taskset.data", str(data), "--env.taskset.task.grader-max-attempts", "2")
        assert fake.responses_by_kind["fail_always"] >= 2
    assert len(traces) == 3
    for trace in traces:
        assert not trace["ok"]
        assert trace["rewards"]["healthbench"] is None  # no reward at all, not a 0
        (error,) = trace["errors"]
        assert error["type"] == "TaskError"
        prompt_id = trace["task"]["data"]["id"]
        assert f"task {prompt_id}: rubric item" in error["message"] and "after 2 attempts" in error["message"]


def test_load_environment_and_the_plugin_lookup(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows())
    env = healthbench.load_environment(data=data, limit=5, n_repeats=2, grader_model="gpt-4.1-mini")
    assert isinstance(env, HealthBenchEnv) and isinstance(env.taskset, HealthBenchTaskset)
    tasks = list(env.taskset)
    keys = [task.key for task in tasks]
    assert len(set(keys)) == len(keys) == 10
    assert [task.data.repeat for task in tasks] == [0] * 5 + [1] * 5
    assert tasks[0].config.grader(tasks[0].config.subset).model == "gpt-4.1-mini"
    assert env.config.agent.harness.id == "null" and env.config.agent.runtime.type == "subprocess"
    # What `vf-eval healthbench` resolves the id to.
    assert taskset_class("healthbench") is HealthBenchTaskset
    assert environment_class("healthbench") is HealthBenchEnv


def test_numbers_take_the_commands_ranges(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows())
    with pytest.raises(SettingsError, match="`n_repeats` is 1000"):
        list(healthbench.load_environment(data=data, n_repeats=1000).taskset)
    with pytest.raises(SettingsError, match="`limit` is 0"):
        list(healthbench.load_environment(data=data, limit=0).taskset)
    with pytest.raises(ValueError, match="finite number"):
        HealthBenchTaskConfig(grader_rpm=float("inf"))


def test_professional_grades_with_its_official_settings() -> None:
    task = HealthBenchTaskConfig(subset="professional")
    grader = task.grader(task.subset)
    assert {name: getattr(grader, name) for name in PROFESSIONAL_GRADER} == PROFESSIONAL_GRADER
    assert task.length_adjustment(task.subset) == PROFESSIONAL_LENGTH_ADJUSTMENT
    assert HealthBenchTaskConfig(subset="hard").length_adjustment("hard") is None


def test_grader_settings_reach_the_grader() -> None:
    task = HealthBenchTaskConfig(
        grader_model="o3", grader_api="responses", grader_reasoning_effort="high", grader_max_attempts=3
    )
    grader = task.grader(task.subset)
    assert (grader.model, grader.api, grader.reasoning_effort, grader.max_attempts) == ("o3", "responses", "high", 3)
    with pytest.raises(ValueError, match="both `length_adjustment_center` and"):
        task.model_copy(update={"length_adjustment_center": 10}).length_adjustment(None)
