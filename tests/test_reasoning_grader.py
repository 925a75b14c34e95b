"""A reasoning model as the grader (SPEC section 7): gpt-5.4 at low effort through Chat Completions, the
Responses API and the Batch API's `/v1/responses` lines, against a loopback endpoint that refuses what OpenAI
refuses (a temperature, `max_tokens`), with metrics and grader prompts equal to the reference's."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.api.client import ApiClient, Retries
from healthbench.api.wire import RESPONSES, Shape, chat_content, responses_content
from healthbench.cli import main
from healthbench.data.schema import Message, RubricItem
from healthbench.errors import GradingError, InvalidResponse
from healthbench.grading.grader import REFERENCE_SHAPE, Grader
from healthbench.grading.prompt import transcript_with_reply
from healthbench.grading.settings import GraderConfig
from healthbench.runs.estimate import REASONING_TOKENS
from healthbench.runs.folder import RunFolder
from healthbench.testing import FakeOpenAI, prompt_verdict
from tests.conftest import write_jsonl
from tests.reference import KEY, check_against_reference, made_up_rows
from tests.test_metaeval import made_up_meta_rows, meta_eval, reference_meta_eval

MODEL = "gpt-5.4-2026-03-05"
FAST = Retries(max_attempts=12, initial_backoff=0.001, max_backoff=0.01)
WAYS = {
    "chat": ["--grader-reasoning-effort", "low"],
    "responses": ["--grader-reasoning-effort", "low", "--grader-api", "responses"],
    "batch-responses": ["--grader-reasoning-effort", "low", "--grader-api", "responses", "--batch"],
}


def grade(tmp: Path, data: Path, responses: Path, base_url: str, *extra: str) -> Result:
    args = ["grade", "--data", str(data), "--responses", str(responses), "--out", str(tmp / "out")]
    args += ["--grader-base-url", base_url, "--grader-model", MODEL, "--no-progress"]
    batched = ["--poll-interval", "0.05"] if "--batch" in extra else []
    return CliRunner().invoke(main, [*args, *extra, *batched], env={"HEALTHBENCH_GRADER_API_KEY": KEY})


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
    request = RunFolder(tmp_path / "out").require_run().spec.grader.request
    assert request is not None and request.api == ("chat" if way == "chat" else "responses")
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
    # One line for the run, not one per task, and no advice to run it again: the same settings fail the same way.
    assert "stopped, the grader's endpoint" in result.output and len(result.output.strip().splitlines()) == 1
    assert "run the same command again" not in result.output
    # 4xx: not retried. Items still waiting to start when the first refusal lands are cancelled, not sent.
    assert 1 <= fake.responses_by_kind["bad_request"] <= len(rows[0]["rubrics"])


def test_request_shapes_by_hand() -> None:
    """Each kind of grader request, key for key; gpt-4.1's is the reference's, byte for byte."""
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "P"}]
    legacy = Grader(GraderConfig().client(), "gpt-4.1-2025-04-14").request_body("P")
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
    broken_answers: list[dict[str, Any]] = [
        {"output": []},
        {"output": [{"type": "reasoning"}]},
        {"status": "failed", "output": []},
        {},
    ]
    for broken in broken_answers:
        with pytest.raises(InvalidResponse, match=r"output|failed"):
            responses_content(broken)


def test_meta_eval_with_a_cheaper_reasoning_grader_matches_the_reference_and_resumes(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """ "Is gpt-5.4-mini a good enough grader?" is one command, and a second run of it sends nothing."""
    assert fake.base_url
    rows = made_up_meta_rows(120)
    data = write_jsonl(tmp_path / "meta.jsonl", rows)
    flags = ("--grader-model", "gpt-5.4-mini", "--grader-reasoning-effort", "low", "--grader-api", "responses")
    result = meta_eval(data, tmp_path / "out", fake.base_url, *flags)
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    expected, _ = reference_meta_eval(rows)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=1e-9), key
    assert len(fake.bodies) == len(rows) and set(fake.paths) == {"/v1/responses"}
    assert all(body["model"] == "gpt-5.4-mini" and body["reasoning"] == {"effort": "low"} for body in fake.bodies)
    fake.reset()
    again = meta_eval(data, tmp_path / "out", fake.base_url, *flags)
    assert again.exit_code == 0, again.output
    assert fake.requests_total == 0
    assert json.loads((tmp_path / "out" / "metrics.json").read_text()) == metrics


def test_dry_run_prices_a_reasoning_grader_with_its_thinking(tmp_path: Path, fake: FakeOpenAI) -> None:
    assert fake.base_url
    rows = made_up_rows()[:2]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    responses = write_jsonl(
        tmp_path / "replies.jsonl", [{"prompt_id": r["prompt_id"], "response": "Rest."} for r in rows]
    )
    dry = ("--dry-run", "--json")
    plain = json.loads(grade(tmp_path, data, responses, fake.base_url, *dry, "--no-grader-reasoning").output)
    thinking = json.loads(grade(tmp_path, data, responses, fake.base_url, *dry, *WAYS["responses"]).output)
    calls = sum(len(r["rubrics"]) for r in rows)
    assert plain["grader"]["calls"] == thinking["grader"]["calls"] == calls
    assert thinking["grader"]["reasoning_tokens"] == REASONING_TOKENS["low"] * calls
    extra = thinking["grader"]["completion_tokens"] - plain["grader"]["completion_tokens"]
    assert extra == REASONING_TOKENS["low"] * calls
    # gpt-5.4 at $2.50 in and $15 out per million tokens, batch at half.
    tokens = thinking["grader"]
    live = (tokens["prompt_tokens"] * 2.5 + tokens["completion_tokens"] * 15.0) / 1e6
    assert tokens["cost_usd"] == pytest.approx(live) and tokens["batch_cost_usd"] == pytest.approx(live / 2)
    assert fake.requests_total == 0


FAULTS = ("429", "500", "503", "drop", "badjson", "prose", "null", "empty", "string_verdict")


def test_every_fault_kind_through_the_responses_api_is_retried_to_the_same_verdicts() -> None:
    config = GraderConfig(model=MODEL, reasoning_effort="low", api="responses")
    with FakeOpenAI(fault_rate=0.25, faults=FAULTS, seed=5) as server:
        assert server.base_url
        client = ApiClient(server.base_url, "sk-test", concurrency=8, retry=FAST, api=RESPONSES)
        grader = Grader(client, MODEL, shape=config.shape, system_message=False)
        prompts = [f"# Conversation\nuser: q{i}\n\n# Rubric item\n[1] item {i}" for i in range(300)]

        async def work() -> list[Any]:
            try:
                return await asyncio.gather(*(grader.verdict(prompt) for prompt in prompts))
            finally:
                await client.aclose()

        results = asyncio.run(work())
        assert set(server.responses_by_kind) >= set(FAULTS) and server.responses_by_kind["ok"] == len(prompts)
        assert set(server.paths) == {"/v1/responses"}
    for prompt, answer in zip(prompts, results, strict=True):
        assert answer.verdict.criteria_met is prompt_verdict(prompt)
        assert answer.usage.reasoning_tokens >= 16


def test_an_ungradable_item_through_the_responses_api_fails_its_task_by_name() -> None:
    with FakeOpenAI(fail_always=lambda body: "never" in json.dumps(body)) as server:
        assert server.base_url
        client = ApiClient(server.base_url, None, retry=Retries(max_attempts=3, initial_backoff=0.001), api=RESPONSES)
        grader = Grader(client, MODEL, shape=GraderConfig(model=MODEL, api="responses").shape, system_message=False)
        rubric = [
            RubricItem(criterion="Is graded", points=5, tags=[]),
            RubricItem(criterion="never", points=2, tags=[]),
        ]
        transcript = transcript_with_reply([Message(role="user", content="Hi")], "Hello")

        async def work() -> Any:
            try:
                return await grader.grade("task-9", transcript, rubric)
            finally:
                await client.aclose()

        with pytest.raises(GradingError) as caught:
            asyncio.run(work())
    assert caught.value.prompt_id == "task-9" and caught.value.criterion == "never"
    assert "not JSON" in caught.value.cause and "after 3 attempts" in caught.value.cause


def test_batch_responses_lines_that_fail_or_come_back_unusable_are_sent_again(tmp_path: Path) -> None:
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = {r["prompt_id"]: f"Reply to {r['prompt_id']}." for r in rows}
    responses = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    with FakeOpenAI(batch_fail_rate=0.2, batch_malformed_rate=0.2, seed=2) as fake:
        assert fake.base_url
        result = grade(tmp_path, data, responses, fake.base_url, *WAYS["batch-responses"])
        assert result.exit_code == 0, result.output
        items = sum(len(r["rubrics"]) for r in rows)
        assert fake.batches_created > 1 and fake.batch_lines_submitted > items
        assert not fake.bodies  # nothing live
        assert {batch.request["endpoint"] for batch in fake.batch_api.batches.values()} == {"/v1/responses"}
    check_against_reference(tmp_path / "out", rows, replies)
