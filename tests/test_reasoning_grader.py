"""A reasoning model as the grader (SPEC section 7): gpt-5.4 at low effort through Chat Completions, the
Responses API and the Batch API's `/v1/responses` lines, against a loopback endpoint that refuses what OpenAI
refuses (a temperature, `max_tokens`), with metrics and grader prompts equal to the reference's."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.config import GraderConfig
from healthbench.grading import REFERENCE_SHAPE, Grader
from healthbench.testing import FakeOpenAI
from healthbench.wire import RESPONSES, InvalidResponse, Shape, chat_content, responses_content
from tests.conftest import write_jsonl
from tests.reference import KEY, check_against_reference, made_up_rows

MODEL = "gpt-5.4-2026-03-05"
WAYS = {
    "chat": ["--grader-reasoning-effort", "low"],
    "responses": ["--grader-reasoning-effort", "low", "--grader-api", "responses"],
    "batch-responses": ["--grader-reasoning-effort", "low", "--grader-api", "responses", "--batch"],
}


def grade(tmp: Path, data: Path, responses: Path, base_url: str, *extra: str) -> Result:
    args = ["grade", "--data", str(data), "--responses", str(responses), "--out", str(tmp / "out")]
    args += ["--grader-base-url", base_url, "--grader-model", MODEL, "--no-progress", "--poll-interval", "0.05"]
    return CliRunner().invoke(main, [*args, *extra], env={"HEALTHBENCH_GRADER_API_KEY": KEY})


def requests_of(fake: FakeOpenAI) -> list[tuple[str, dict[str, Any]]]:
    """(endpoint, body) of every grader request, live or in a batch line."""
    live = list(zip(fake.paths, fake.bodies, strict=True))
    batched = [
        (batch.request["endpoint"], json.loads(text))
        for batch, text in zip(_batches_by_line(fake), fake.batch_bodies, strict=True)
    ]
    return live + batched


def _batches_by_line(fake: FakeOpenAI) -> list[Any]:
    return [batch for batch in fake.batch_api.batches.values() for _ in range(batch.total)]


def user_prompt(body: dict[str, Any]) -> str:
    turns = body.get("messages") or body["input"]
    return str(next(turn["content"] for turn in turns if turn["role"] == "user"))


@pytest.mark.parametrize("way", list(WAYS))
def test_gpt_5_4_at_low_effort_grades_as_the_reference(tmp_path: Path, fake: FakeOpenAI, way: str) -> None:
    assert fake.strict_params and fake.base_url
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = {r["prompt_id"]: f"Reply to {r['prompt_id']}: rest." for r in rows}
    responses = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    result = grade(tmp_path, data, responses, fake.base_url, *WAYS[way])
    assert result.exit_code == 0, result.output
    sent = requests_of(fake)
    expected = check_against_reference(tmp_path / "out", rows, replies)
    assert Counter(user_prompt(body) for _, body in sent) == expected
    endpoint = "chat/completions" if way == "chat" else "responses"
    assert all(path.endswith(endpoint) for path, _ in sent)
    assert (len(fake.bodies) == 0) == way.startswith("batch")
    for _, body in sent:
        assert body["model"] == MODEL
        assert not {"temperature", "max_tokens", "max_completion_tokens", "max_output_tokens"} & set(body)
        if way == "chat":
            assert body["reasoning_effort"] == "low"
            assert body["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
        else:
            assert body["reasoning"] == {"effort": "low"} and "reasoning_effort" not in body
            assert body["input"] == [{"role": "user", "content": user_prompt(body)}]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["grader_request"]["api"] == ("chat" if way == "chat" else "responses")
    usage = json.loads((tmp_path / "out" / "usage.json").read_text())["whole_run"]["grader"]
    # The fake thinks 16 tokens per call at low effort, and bills them as output, as OpenAI does.
    assert usage["reasoning_tokens"] == 16 * usage["calls"] > 0
    assert usage["completion_tokens"] > usage["reasoning_tokens"]


def test_the_sample_through_the_responses_api_matches_the_reference(
    tmp_path: Path, sample_path: Path, fake: FakeOpenAI
) -> None:
    assert fake.base_url
    rows = [json.loads(line) for line in sample_path.read_text(encoding="utf-8").split("\n") if line.strip()]
    replies = {r["prompt_id"]: f"Fixed reply {i}" for i, r in enumerate(rows)}
    responses = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    result = grade(tmp_path, sample_path, responses, fake.base_url, *WAYS["responses"])
    assert result.exit_code == 0, result.output
    assert Counter(user_prompt(body) for body in fake.bodies) == check_against_reference(
        tmp_path / "out", rows, replies
    )
    assert set(fake.paths) == {"/v1/responses"}


def test_the_reference_settings_are_refused_by_a_reasoning_model_and_named_in_the_error(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """The bug this fixes, kept as a guard: temperature 0.5 and max_tokens sent to gpt-5.4 fail at once."""
    assert fake.base_url
    rows = made_up_rows()[:1]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    responses = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": rows[0]["prompt_id"], "response": "Rest."}])
    result = grade(tmp_path, data, responses, fake.base_url, "--no-grader-reasoning")
    assert result.exit_code == 1
    assert "HTTP 400" in result.output and "temperature" in result.output
    assert fake.responses_by_kind["bad_request"] == len(rows[0]["rubrics"])  # 4xx: not retried


def test_request_shapes_by_hand() -> None:
    """Each kind of grader request, key for key; gpt-4.1's is the reference's, byte for byte."""
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "P"}]
    legacy = Grader(GraderConfig().chat(), "gpt-4.1-2025-04-14").request_body("P")
    assert json.dumps(legacy) == (
        '{"model": "gpt-4.1-2025-04-14", "messages": [{"role": "system", "content": "You are a helpful '
        'assistant."}, {"role": "user", "content": "P"}], "temperature": 0.5, "max_tokens": 2048}'
    )
    assert GraderConfig().shape == REFERENCE_SHAPE
    assert GraderConfig(model=MODEL, reasoning_effort="low").shape.body(MODEL, messages) == {
        "model": MODEL,
        "messages": messages,
        "reasoning_effort": "low",
    }
    capped = GraderConfig(model="o3", max_output_tokens=900, api="responses")
    assert capped.shape.body("o3", messages) == {
        "model": "o3",
        "input": [{"role": "developer", "content": "S"}, {"role": "user", "content": "P"}],
        "max_output_tokens": 900,
    }
    assert Shape("responses", False, 0.5, 2048).body("gpt-4.1", messages[1:]) == {
        "model": "gpt-4.1",
        "input": [{"role": "user", "content": "P"}],
        "temperature": 0.5,
        "max_output_tokens": 2048,
    }
    assert not GraderConfig(api="responses").sends_system_message
    assert GraderConfig(api="responses", system_message=True).sends_system_message
    with pytest.raises(ValueError, match="no reasoning effort"):
        GraderConfig(model="gpt-4.1", reasoning_effort="low")


def test_answers_of_both_apis_are_read_with_their_usage() -> None:
    chat = {
        "choices": [{"message": {"content": "yes"}}],
        "usage": {
            "prompt_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens": 30,
            "completion_tokens_details": {"reasoning_tokens": 20},
        },
    }
    content, usage = chat_content(json.dumps(chat).encode())
    assert (content, usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens) == ("yes", 10, 4, 30)
    assert usage.reasoning_tokens == 20
    response = {
        "status": "completed",
        "output": [
            {"type": "reasoning", "summary": []},
            {
                "type": "message",
                "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}],
            },
        ],
        "usage": {
            "input_tokens": 7,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 5},
        },
    }
    content, usage = RESPONSES.read(response, batch=True)
    assert (content, usage.prompt_tokens, usage.completion_tokens, usage.reasoning_tokens) == ("ab", 7, 9, 5)
    assert usage.batch
    for broken in ({"output": []}, {"output": [{"type": "reasoning"}]}, {"status": "failed", "output": []}, {}):
        with pytest.raises(InvalidResponse, match=r"output|failed"):
            responses_content(broken)
