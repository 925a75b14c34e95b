"""HealthBench Professional end to end, as a user runs it: made-up rows in its published schema found through
HEALTHBENCH_DATA_DIR, and `grade`, `baseline` and `serve` with no grader flags, against the strict loopback
fake. The official configuration is what gets sent (gpt-5.4 at low effort through the Responses API), the
headline and the rewards are length-adjusted, and the four slices get metrics of their own."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from openreward import AsyncOpenReward

from healthbench.api.pacing.pacer import FIRST_WINDOW
from healthbench.cli import main
from healthbench.data.professional import PROFESSIONAL_FILENAME
from healthbench.grading.prompt import TEMPLATE
from healthbench.grading.scoring import LengthAdjustment
from healthbench.runs.folder import RunFolder
from healthbench.runs.spec import RunSpec
from healthbench.testing import FakeOpenAI, prompt_verdict
from tests.conftest import write_jsonl
from tests.reference import KEY
from tests.serving import server_process

OFFICIAL = "gpt-5.4-2026-03-05"
SLICES = {
    "use_case": ("consult", "writing", "research"),
    "type": ("good_faith", "red_teaming"),
    "difficulty": ("easy", "medium", "hard"),
    "specialty": ("Cardiology", "Emergency Medicine"),
}


def pro_row(i: int) -> dict[str, Any]:
    """A made-up row in Professional's schema (never real data); every slice value occurs."""
    return {
        "id": f"pro-{i:03d}",
        "conversation": [{"role": "user", "content": f"Case {i}: summarise the plan for a made-up patient."}],
        "rubric_items": [
            {"criterion_text": f"Names the first-line option for case {i}", "points": 6},
            {"criterion_text": f"Mentions follow-up for case {i}", "points": 3},
            {"criterion_text": f"Invents a dose for case {i}", "points": -5},
        ],
        "physician_response": f"Plan for case {i}: " + "details " * (i % 400),
        **{field: values[i % len(values)] for field, values in SLICES.items()},
    }


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The 525 made-up rows under their official file name in a HEALTHBENCH_DATA_DIR folder."""
    rows = [pro_row(i) for i in range(525)]
    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(folder / PROFESSIONAL_FILENAME, rows)
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(folder))
    monkeypatch.setenv("HEALTHBENCH_CACHE_DIR", str(tmp_path / "cache"))
    for name in (
        "HEALTHBENCH_GRADER_MODEL",
        "HEALTHBENCH_ALLOW_SHA256_MISMATCH",
        "HEALTHBENCH_ALLOW_ROW_COUNT_MISMATCH",
    ):
        monkeypatch.delenv(name, raising=False)
    return rows


def expected_scores(row: dict[str, Any], reply: str) -> tuple[float, float]:
    """(task score, length-adjusted score) by hand, with the fake's verdicts."""
    conversation = "\n\n".join(
        f"{m['role']}: {m['content']}" for m in [*row["conversation"], {"role": "assistant", "content": reply}]
    )
    met = 0
    for item in row["rubric_items"]:
        prompt = TEMPLATE.replace("<<conversation>>", conversation)
        if prompt_verdict(prompt.replace("<<rubric_item>>", f"[{item['points']}] {item['criterion_text']}")):
            met += item["points"]
    score = met / sum(item["points"] for item in row["rubric_items"] if item["points"] > 0)
    return score, score - 0.0147 * (len(reply) - 2000) / 500


def clip(values: list[float]) -> float:
    return min(1.0, max(0.0, sum(values) / len(values)))


def run(*args: str, base_url: str) -> Result:
    env = {"HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_GRADER_BASE_URL": base_url}
    return CliRunner().invoke(main, [*args, "--no-progress"], env=env)


def check_run(out: Path, rows: list[dict[str, Any]], replies: dict[str, str], fake: FakeOpenAI) -> RunSpec:
    """The official requests, the adjusted headline, unadjusted slices; returns run.json."""
    assert set(fake.paths) == {"/v1/responses"}
    assert len(fake.bodies) == 3 * len(rows)
    # All but a new host's first window carry the cache key (`test_prompt_cache`), none anything else of ours.
    assert sum("prompt_cache_key" not in body for body in fake.bodies) < FIRST_WINDOW
    for body in fake.bodies:
        assert set(body) | {"prompt_cache_key"} == {"model", "input", "reasoning", "prompt_cache_key"}
        assert body["model"] == OFFICIAL and body["reasoning"] == {"effort": "low"}
        assert [turn["role"] for turn in body["input"]] == ["user"]
    metrics = json.loads((out / "metrics.json").read_text())
    scores = {r["id"]: expected_scores(r, replies[r["id"]]) for r in rows}
    adjusted = [scores[r["id"]][1] for r in rows]
    assert metrics["score"] == pytest.approx(clip(adjusted), abs=1e-9)
    assert metrics["overall_score_length_adjusted"] == metrics["score"]
    assert metrics["overall_score"] == pytest.approx(clip([s for s, _ in scores.values()]), abs=1e-9)
    assert metrics["score"] != metrics["overall_score"]
    by_slice: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for field in SLICES:
            by_slice[f"{field}:{row[field]}"].append(scores[row["id"]][0])
    assert {name for name in metrics if ":" in name and not name.endswith(("n_samples", "bootstrap_std"))} == set(
        by_slice
    )
    for name, values in by_slice.items():
        assert metrics[name] == pytest.approx(clip(values), abs=1e-9)
        assert metrics[f"{name}:n_samples"] == len(values)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for record in results:
        assert record["length_adjusted_score"] == pytest.approx(scores[record["prompt_id"]][1], abs=1e-12)
    return RunFolder(out).require_run().spec


def test_grade_with_no_grader_flags_is_the_official_configuration(
    tmp_path: Path, offline: list[dict[str, Any]], fake: FakeOpenAI
) -> None:
    assert fake.base_url
    replies = {row["id"]: f"Reply {i}: " + "plan " * (i % 900) for i, row in enumerate(offline)}
    answers = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    result = run("grade", "--subset", "professional", "--responses", str(answers), "--out", str(tmp_path / "o"),
                 base_url=fake.base_url)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "length-adjusted score" in result.output and "not HealthBench Professional" not in result.output
    recorded = check_run(tmp_path / "o", offline, replies, fake)
    assert recorded.official is not None and recorded.official.configuration and recorded.official.differences == []
    assert recorded.adjustment == LengthAdjustment(2000, 0.0147)
    assert recorded.grader.model == OFFICIAL
    assert recorded.grader.request is not None and recorded.grader.request.reasoning_effort == "low"
    report = CliRunner().invoke(main, ["report", str(tmp_path / "o")])
    assert report.exit_code == 0, report.output
    html = (tmp_path / "o" / "report.html").read_text()
    assert "length-adjusted" in html and "not HealthBench Professional" not in html

    fake.reset()
    other = run("grade", "--subset", "professional", "--responses", str(answers), "--out", str(tmp_path / "g41"),
                "--grader-model", "gpt-4.1-2025-04-14", base_url=fake.base_url)  # fmt: skip
    assert other.exit_code == 0, other.output
    assert "not HealthBench Professional's official configuration" in other.output
    official = RunFolder(tmp_path / "g41").require_run().spec.official
    assert official is not None and not official.configuration
    assert [d.model_dump() for d in official.differences] == [
        {"setting": "grader model", "value": "gpt-4.1-2025-04-14", "official": OFFICIAL},
        {"setting": "grader reasoning effort", "value": "none", "official": "low"},
    ]
    # gpt-4.1 takes no reasoning effort, so the official default effort is dropped rather than refused.
    assert {"model", "input", "temperature", "max_output_tokens", "prompt_cache_key"} == set(fake.bodies[0]) | {
        "prompt_cache_key"
    }


def test_baseline_grades_the_physician_responses(
    tmp_path: Path, offline: list[dict[str, Any]], fake: FakeOpenAI
) -> None:
    assert fake.base_url
    result = run("baseline", "--subset", "professional", "--out", str(tmp_path / "b"), base_url=fake.base_url)
    assert result.exit_code == 0, result.output
    replies = {row["id"]: row["physician_response"] for row in offline}
    recorded = check_run(tmp_path / "b", offline, replies, fake)
    assert recorded.baseline is not None and recorded.baseline.completions == "physician responses"
    assert recorded.official is not None and recorded.official.configuration


def test_serve_rewards_the_length_adjusted_score(offline: list[dict[str, Any]], fake: FakeOpenAI) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "HEALTHBENCH_GRADER_API_KEY")}
    env.update(PYTHONUNBUFFERED="1", HEALTHBENCH_GRADER_BASE_URL=fake.base_url or "")
    command = [sys.executable, "-m", "healthbench", "serve", "--subset", "professional", "--host", "127.0.0.1"]
    replies = {index: "Short plan." * (1 + 40 * index) for index in (0, 1, 7)}

    async def sessions(base_url: str) -> list[Any]:
        client = AsyncOpenReward(api_key="local")
        environment = client.environments.get("healthbench", base_url=base_url)
        try:
            assert await environment.num_tasks("professional") == len(offline)
            outputs = []
            for index, reply in replies.items():
                async with environment.session(
                    split="professional", index=index, secrets={"OPENAI_API_KEY": KEY}
                ) as session:
                    outputs.append(await session.call_terminal_tool(reply))
            return outputs
        finally:
            await client.environments.aclose()

    with server_process([*command, "--port", "0", "--max-attempts", "1"], env) as (url, _):
        fake.reset()
        outputs = asyncio.run(sessions(url))
    for (index, reply), output in zip(replies.items(), outputs, strict=True):
        score, adjusted = expected_scores(offline[index], reply)
        assert output.reward == pytest.approx(adjusted, abs=1e-9)
        assert output.metadata["score"] == pytest.approx(score, abs=1e-9)
        assert output.metadata["length_adjusted_score"] == pytest.approx(adjusted, abs=1e-9)
        assert output.metadata["length_adjustment"] == {"center": 2000, "penalty_per_500_chars": 0.0147}
        assert output.metadata["grader_model"] == OFFICIAL
    assert set(fake.paths) == {"/v1/responses"}
    assert all(body["reasoning"] == {"effort": "low"} for body in fake.bodies)
