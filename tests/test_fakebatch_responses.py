"""Tests of fake batches to /v1/responses: answered as live /responses is, with the same rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from healthbench.testing import policy_reply, prompt_verdict, verdict_reply
from healthbench.testing.replies import PROSE, STRING_VERDICT
from tests.batchclient import Client, StartFake
from tests.test_fakebatch import grader_prompt

RESPONSES = "/v1/responses"


def responses(content: str, model: str = "gpt-5.4-2026-03-05", **fields: Any) -> dict[str, Any]:
    return {"model": model, "input": [{"role": "user", "content": content}], **fields}


def jsonl(bodies: list[Any], url: str = RESPONSES) -> bytes:
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": url, "body": body} for i, body in enumerate(bodies)]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def submit(client: Client, data: bytes, endpoint: str = RESPONSES) -> dict[str, Any]:
    status, file = client.upload(data)
    assert status == 200, file
    status, batch = client.create(file["id"], endpoint=endpoint)
    assert status == 200, batch
    return dict(batch)


def by_custom_id(client: Client, batch: dict[str, Any]) -> dict[str, dict[str, Any]]:
    lines = client.lines(batch["output_file_id"]) if batch["output_file_id"] else []
    lines += client.lines(batch["error_file_id"]) if batch["error_file_id"] else []
    return {line["custom_id"]: line["response"] for line in lines}


def output_text(response: dict[str, Any]) -> str | None:
    [message] = [item for item in response["output"] if item["type"] == "message"]
    texts = [part["text"] for part in message["content"] if part["type"] == "output_text"]
    return "".join(texts) if texts else None


def comparable(response: dict[str, Any]) -> dict[str, Any]:
    """A response without what differs between any two answers: its ids and its time."""
    output = [{k: v for k, v in item.items() if k != "id"} for item in response["output"]]
    return {**{k: v for k, v in response.items() if k not in ("id", "created_at")}, "output": output}


def test_responses_batch_lines_are_answered_as_live_requests(start_fake: StartFake) -> None:
    def respond(body: dict[str, Any]) -> str | None:
        return "scripted" if body["model"] == "scripted-model" else None

    server, client = start_fake(respond=respond)
    bodies = [responses(grader_prompt(i), reasoning={"effort": "low"}) for i in range(8)]
    bodies += [responses("Is ibuprofen safe?", "gpt-4.1"), responses("hook", "scripted-model")]
    bodies.append(responses("x", temperature=0.5))  # refused: a reasoning model takes no temperature
    bodies.append({"model": "gpt-4.1", "messages": [{"role": "user", "content": "x"}]})  # refused: chat-shaped
    batch = submit(client, jsonl(bodies))
    assert batch["endpoint"] == RESPONSES and batch["status"] == "completed"
    assert batch["request_counts"] == {"total": 12, "completed": 10, "failed": 2}
    assert client.batch(batch["id"])["endpoint"] == RESPONSES
    answers = by_custom_id(client, batch)
    assert server.requests_total == 0 and server.batch_lines_submitted == 12  # batches leave live counters alone
    for i, body in enumerate(bodies[:10]):
        answer = answers[f"r{i}"]
        assert answer["status_code"] == 200
        status, live = client.json("POST", "/responses", body)
        assert status == 200
        assert comparable(answer["body"]) == comparable(live)
        assert answer["body"]["object"] == "response" and answer["body"]["id"].startswith("resp_")
    assert [output_text(answers[f"r{i}"]["body"]) for i in range(8)] == [
        verdict_reply(prompt_verdict(grader_prompt(i))) for i in range(8)
    ]
    assert {prompt_verdict(grader_prompt(i)) for i in range(8)} == {True, False}
    assert answers["r0"]["body"]["output"][0]["type"] == "reasoning"
    assert answers["r0"]["body"]["usage"]["output_tokens_details"] == {"reasoning_tokens": 16}
    assert output_text(answers["r8"]["body"]) == policy_reply(bodies[8]["input"])
    assert output_text(answers["r9"]["body"]) == "scripted"
    for custom_id, code in (("r10", "unsupported_value"), ("r11", "unsupported_parameter")):
        assert answers[custom_id]["status_code"] == 400
        assert answers[custom_id]["body"]["error"]["code"] == code


def test_strict_params_off_answers_the_lines_it_would_refuse(start_fake: StartFake) -> None:
    _, client = start_fake(strict_params=False)
    batch = submit(
        client, jsonl([responses("x", temperature=0.5), responses("y", "gpt-4.1", reasoning={"effort": "low"})])
    )
    answers = by_custom_id(client, batch)
    assert [answers[f"r{i}"]["status_code"] for i in range(2)] == [200, 200]
    assert answers["r1"]["body"]["usage"]["output_tokens_details"] == {"reasoning_tokens": 0}


@pytest.mark.parametrize(
    ("endpoint", "stray"), [(RESPONSES, "/v1/chat/completions"), ("/v1/chat/completions", RESPONSES)]
)
def test_a_line_whose_url_is_not_the_batch_endpoint_is_refused(
    start_fake: StartFake, endpoint: str, stray: str
) -> None:
    _, client = start_fake()
    body = (
        responses(grader_prompt(0))
        if endpoint == RESPONSES
        else {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    )
    lines = [
        {"custom_id": f"r{i}", "method": "POST", "url": url, "body": body}
        for i, url in enumerate([endpoint, stray, endpoint])
    ]
    batch = submit(client, "".join(json.dumps(line) + "\n" for line in lines).encode(), endpoint)
    assert batch["status"] == "failed" and batch["endpoint"] == endpoint
    [error] = batch["errors"]["data"]
    assert error["code"] == "invalid_url" and error["line"] == 2 and endpoint in error["message"]


def test_an_endpoint_the_batch_api_does_not_serve_is_refused(start_fake: StartFake) -> None:
    _, client = start_fake()
    status, file = client.upload(jsonl([responses("x")], "/v1/embeddings"))
    assert status == 200
    status, reply = client.create(file["id"], endpoint="/v1/embeddings")
    assert status == 400 and "/v1/responses" in reply["error"]["message"]


def test_responses_lines_get_the_same_injected_failures_as_chat_lines(start_fake: StartFake) -> None:
    _, client = start_fake(batch_malformed_rate=1.0)
    bodies = [responses(grader_prompt(i)) for i in range(4)] + [responses("policy", "gpt-4.1")]
    answers = by_custom_id(client, submit(client, jsonl(bodies)))
    texts = [output_text(answers[f"r{i}"]["body"]) for i in range(4)]
    assert sorted(texts, key=str) == sorted([PROSE, STRING_VERDICT] * 2, key=str)
    assert output_text(answers["r4"]["body"]) == policy_reply(bodies[4]["input"])  # only verdicts are spoiled
    _, failing = start_fake(batch_fail_rate=1.0)
    answers = by_custom_id(failing, submit(failing, jsonl(bodies)))
    assert {answer["status_code"] for answer in answers.values()} == {500}
