"""A prompt the model's provider refuses (HTTP 400 `invalid_prompt`, a content filter, a context too long) is
graded as the reference grades it, with the reply "No response (bad request)."; refusals that are not the
exception, and 4xx answers about anything but the prompt, stop the run with the provider's message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.errors import PolicyMisuse, RequestFailed
from healthbench.runs.policy import REFUSAL_PROBE, REFUSED_REPLY, PromptRefusal, RefusalGuard, misuse, prompt_refusal
from healthbench.testing import FakeOpenAI
from tests.conftest import numbered_rows, write_jsonl
from tests.reference import KEY

FLAGGED = (
    "Invalid prompt: your prompt was flagged as potentially violating our usage policy. Please try again with a "
    "different prompt: https://platform.openai.com/docs/guides/reasoning#advice-on-prompting"
)
INVALID_PROMPT = {
    "error": {"message": FLAGGED, "type": "invalid_request_error", "param": None, "code": "invalid_prompt"}
}
REFUSED = {7, 42, 77}


def failure(status: int | None, error: Any) -> RequestFailed:
    body = json.dumps(error).encode()
    return RequestFailed(f"HTTP {status}: {body[:200].decode()}", 1, status=status, body=body)


def test_refusals_of_the_prompt_are_told_from_refusals_of_the_request() -> None:
    refusal = prompt_refusal(failure(400, INVALID_PROMPT))
    assert refusal == PromptRefusal(400, "invalid_prompt", FLAGGED)
    context = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
            "9100 tokens.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    azure = {
        "error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management "
            "policy.",
            "code": "content_filter",
            "param": "prompt",
        }
    }
    vllm = {
        "object": "error",
        "message": "This model's maximum context length is 4096 tokens.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    for error in (context, azure, vllm):
        assert prompt_refusal(failure(400, error)) is not None, error
        assert misuse(failure(400, error), "http://x/v1") is None
    temperature = {
        "error": {
            "message": "Unsupported value: 'temperature' does not support 0.5 with this model.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    }
    unknown_model = {
        "error": {
            "message": "The model `nope` does not exist",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }
    other: list[tuple[int, dict[str, Any]]] = [
        (400, temperature),
        (404, unknown_model),
        (400, {"error": {"message": "bad", "code": None}}),
    ]
    for status, wrong in other:
        assert prompt_refusal(failure(status, wrong)) is None
        stop = misuse(failure(status, wrong), "http://x/v1")
        assert stop is not None and wrong["error"]["message"] in str(stop) and "http://x/v1" in str(stop)
    # Past the retry bound on a 5xx or a timeout, there is no status: neither a refusal nor the caller's mistake.
    assert prompt_refusal(RequestFailed("TimeoutError", 12)) is None
    assert misuse(RequestFailed("HTTP 503: busy", 12), "http://x/v1") is None


def test_the_guard_stops_when_refusals_are_not_the_exception() -> None:
    refusal = prompt_refusal(failure(400, INVALID_PROMPT))
    assert refusal is not None
    guard = RefusalGuard(expected=100)
    for _ in range(REFUSAL_PROBE - 1):
        guard.refuse(refusal)
    with pytest.raises(PolicyMisuse, match=f"refused {REFUSAL_PROBE} of the {REFUSAL_PROBE} prompts") as stopped:
        guard.refuse(refusal)
    assert FLAGGED in str(stopped.value)
    # 3 in 100, first or last: never stopped.
    for refused in ({0, 1, 2}, {97, 98, 99}):
        guard = RefusalGuard(expected=100)
        for i in range(100):
            guard.refuse(refusal) if i in refused else guard.answer()
        assert guard.refused == 3
    # Refusals come back first (they are fast): the count that decides is taken once 20 answers are in.
    early = RefusalGuard(expected=100)
    for _ in range(15):
        early.refuse(refusal)
    for _ in range(4):
        early.answer()
    with pytest.raises(PolicyMisuse, match="refused 15 of the 20 prompts") as stopped:
        early.answer()
    assert FLAGGED in str(stopped.value)
    # A run of 5 samples that are all refused stops too; a resumed run counts the replies it already has.
    small = RefusalGuard(expected=5)
    for _ in range(4):
        small.refuse(refusal)
    with pytest.raises(PolicyMisuse):
        small.refuse(refusal)
    resumed = RefusalGuard(expected=100, answered=97)
    for _ in range(3):
        resumed.refuse(refusal)


def refuse_some(body: dict[str, Any]) -> dict[str, Any] | None:
    if body.get("model") != "fake-model":
        return None
    asked = body["messages"][-1]["content"]
    return INVALID_PROMPT if any(asked.startswith(f"Question {i}:") for i in REFUSED) else None


def run_eval(data: Path, out: Path, base_url: str, *extra: str) -> Result:
    args = ["eval", "--model", "fake-model", "--base-url", base_url, "--data", str(data), "--out", str(out)]
    args += ["--grader-base-url", base_url, "--no-progress", *extra]
    return CliRunner().invoke(main, args, env={"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY})


def results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_refused_prompts_are_graded_with_the_reference_placeholder(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(100))
    out = tmp_path / "out"
    with FakeOpenAI(refuse=refuse_some) as fake:
        assert fake.base_url
        result = run_eval(data, out, fake.base_url)
        assert result.exit_code == 0, result.output
        assert fake.responses_by_kind["refused"] == 3
        graded_placeholder = [
            b for b in fake.bodies if f"assistant: {REFUSED_REPLY}" in b.get("messages", [{}])[-1].get("content", "")
        ]
        assert len(graded_placeholder) == 3 * 2  # each refused sample's two rubric items are graded
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["score:n_samples"] == 100
        assert "score 0." in result.output or "score 1." in result.output
        assert f"(3 refused by the model and graded as the reply {REFUSED_REPLY!r})" in result.output
        refused = [r for r in results(out) if "policy_error" in r]
        assert sorted(r["prompt_id"] for r in refused) == ["t007", "t042", "t077"]
        for r in refused:
            assert r["response"] == REFUSED_REPLY and len(r["rubric_items"]) == 2
            assert r["policy_error"] == {"status": 400, "code": "invalid_prompt", "message": FLAGGED}
        report = (out / "report.html").read_text()
        assert "3 refused by the model" in report and report.count("Refused by the model (HTTP 400 invalid_prompt") == 3
        # Run again: the refused prompts are asked again (and refused again), the rest is reused, and a
        # resumed run is not mistaken for one whose every prompt is refused.
        fake.reset()
        again = run_eval(data, out, fake.base_url)
        assert again.exit_code == 0, again.output
        assert fake.responses_by_kind["refused"] == 3 and fake.requests_total == 3
        assert json.loads((out / "metrics.json").read_text()) == metrics


def test_policy_errors_fail_keeps_a_refused_prompt_ungraded(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(100))
    out = tmp_path / "out"
    with FakeOpenAI(refuse=refuse_some) as fake:
        assert fake.base_url
        result = run_eval(data, out, fake.base_url, "--policy-errors", "fail")
    assert result.exit_code == 1
    assert "3 of 100 samples could not be graded; no score written" in result.output
    assert "task t042: the model under evaluation gave no reply: HTTP 400" in result.output
    assert not (out / "metrics.json").exists()
    assert len(results(out)) == 97


def test_every_prompt_refused_stops_at_once_with_the_providers_message(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(100))
    out = tmp_path / "out"
    with FakeOpenAI(refuse=lambda body: INVALID_PROMPT if body.get("model") == "fake-model" else None) as fake:
        assert fake.base_url
        result = run_eval(data, out, fake.base_url, "--n-repeats", "3")
    # Read once the fake has stopped, so every request it took is counted. Stopped after the first REFUSAL_PROBE
    # answers: what was in flight then (at most the policy's concurrency of 32) was sent, nothing after it, and no
    # reply was graded (a refused prompt's placeholder waits for the guard's decision, which stopped the run).
    assert REFUSAL_PROBE <= fake.responses_by_kind["refused"] <= REFUSAL_PROBE + 32
    assert fake.requests_total == fake.responses_by_kind["refused"]
    assert result.exit_code == 1
    assert f"refused {REFUSAL_PROBE} of the {REFUSAL_PROBE} prompts answered so far" in result.output
    assert FLAGGED in result.output and "no score" in result.output
    assert "Traceback" not in result.output
    assert not (out / "metrics.json").exists()


def test_a_4xx_about_a_parameter_stops_the_run(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", numbered_rows(100))
    out = tmp_path / "out"
    # The fake refuses a temperature for a reasoning model, as OpenAI does.
    with FakeOpenAI() as fake:
        assert fake.base_url
        args = ["eval", "--model", "o3", "--base-url", fake.base_url, "--data", str(data), "--out", str(out)]
        args += ["--grader-base-url", fake.base_url, "--no-progress", "--no-reasoning", "--temperature", "0.5"]
        result = CliRunner().invoke(main, args, env={"OPENAI_API_KEY": KEY, "HEALTHBENCH_GRADER_API_KEY": KEY})
        assert fake.requests_total <= 32  # the first answer stops it; only what was in flight was sent
    assert result.exit_code == 1
    assert "the model's endpoint" in result.output
    assert "refused a request (HTTP 400 unsupported_value: Unsupported value: 'temperature'" in result.output
    assert not (out / "metrics.json").exists()
