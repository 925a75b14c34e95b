"""Tests of the fake's Responses API and of OpenAI's reasoning-model rules, over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from healthbench.testing import FakeOpenAI, policy_reply, prompt_verdict, verdict_reply

Reply = tuple[int, bytes]


def grader_prompt(i: int) -> str:
    return f"# Conversation\nuser: question {i}\n\n# Rubric item\n[5] Mentions item {i}\n\n# Instructions\n..."


def chat(content: str, model: str = "gpt-4.1", **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **fields}


def responses(content: str, model: str = "gpt-4.1", **fields: Any) -> dict[str, Any]:
    """A /responses body in the shape the reference's ResponsesSampler sends."""
    return {"model": model, "input": [{"role": "user", "content": [{"type": "input_text", "text": content}]}], **fields}


def post_all(server: FakeOpenAI, requests: list[tuple[str, Any]]) -> list[Reply]:
    """POST each (path under /v1, body) one after another, so arrival order is fixed."""
    assert server.base_url is not None
    base_url = server.base_url

    async def run() -> list[Reply]:
        replies = []
        async with aiohttp.ClientSession() as session:
            for path, body in requests:
                async with session.post(base_url + path, json=body) as resp:
                    replies.append((resp.status, await resp.read()))
        return replies

    return asyncio.run(run())


def post_one(server: FakeOpenAI, path: str, body: Any) -> tuple[int, Any]:
    [(status, raw)] = post_all(server, [(path, body)])
    return status, json.loads(raw)


def output_text(response: dict[str, Any]) -> str | None:
    """What the SDK's ``output_text`` would be, or None when the message has no text part."""
    [message] = [item for item in response["output"] if item["type"] == "message"]
    texts = [part["text"] for part in message["content"] if part["type"] == "output_text"]
    return "".join(texts) if texts else None


def test_responses_answer_has_the_raw_api_shape_and_usage() -> None:
    with FakeOpenAI() as server:
        status, reply = post_one(server, "/responses", {"model": "gpt-4.1", "input": "What helps a headache?"})
        assert server.responses_by_kind == {"ok": 1}
    assert status == 200
    content = policy_reply([{"role": "user", "content": "What helps a headache?"}])
    assert reply == {
        "id": "resp_fake-1",
        "object": "response",
        "created_at": reply["created_at"],
        "status": "completed",
        "model": "gpt-4.1",
        "output": [
            {
                "type": "message",
                "id": "msg_fake-1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": content, "annotations": []}],
            }
        ],
        "usage": {
            "input_tokens": len("What helps a headache?") // 4 + 1,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": len(content) // 4 + 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": len("What helps a headache?") // 4 + 1 + len(content) // 4 + 1,
        },
    }
    assert isinstance(reply["created_at"], int)


@pytest.mark.parametrize(("effort", "reasoning_tokens"), [("minimal", 0), ("low", 16), (None, 64), ("high", 256)])
def test_reasoning_models_spend_reasoning_tokens_by_effort(effort: str | None, reasoning_tokens: int) -> None:
    prompt = grader_prompt(1)
    reasoning = {} if effort is None else {"reasoning": {"effort": effort}}
    effort_field = {} if effort is None else {"reasoning_effort": effort}
    with FakeOpenAI() as server:
        [(r_status, r_raw), (c_status, c_raw)] = post_all(
            server,
            [
                ("/responses", responses(prompt, "gpt-5.4-2026-03-05", **reasoning)),
                ("/chat/completions", chat(prompt, "o3", **effort_field)),
            ],
        )
    assert r_status == c_status == 200
    response, completion = json.loads(r_raw), json.loads(c_raw)
    visible = len(verdict_reply(prompt_verdict(prompt))) // 4 + 1
    assert response["output"][0] == {"type": "reasoning", "id": "rs_fake-1", "summary": []}
    assert response["output"][1]["type"] == "message"
    assert response["usage"]["output_tokens_details"] == {"reasoning_tokens": reasoning_tokens}
    assert response["usage"]["output_tokens"] == visible + reasoning_tokens
    usage = completion["usage"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": reasoning_tokens}
    assert usage["completion_tokens"] == visible + reasoning_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + visible + reasoning_tokens


def test_chat_and_responses_give_the_same_verdict_and_reply() -> None:
    prompts = [grader_prompt(i) for i in range(20)]
    policy = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is ibuprofen safe?"}]
    with FakeOpenAI() as server:
        replies = post_all(
            server,
            [("/chat/completions", chat(p)) for p in prompts]
            + [("/responses", responses(p, "gpt-5.4")) for p in prompts]
            + [("/responses", {"model": "o4-mini", "input": p}) for p in prompts]
            + [
                ("/chat/completions", {"model": "gpt-4.1", "messages": policy}),
                ("/responses", {"model": "gpt-4.1", "input": policy}),
            ],
        )
    assert all(status == 200 for status, _ in replies)
    chat_texts = [json.loads(raw)["choices"][0]["message"]["content"] for _, raw in replies[:20]]
    parts_texts = [output_text(json.loads(raw)) for _, raw in replies[20:40]]
    string_texts = [output_text(json.loads(raw)) for _, raw in replies[40:60]]
    expected = [verdict_reply(prompt_verdict(p)) for p in prompts]
    assert chat_texts == parts_texts == string_texts == expected
    assert {prompt_verdict(p) for p in prompts} == {True, False}
    assert json.loads(replies[60][1])["choices"][0]["message"]["content"] == policy_reply(policy)
    assert output_text(json.loads(replies[61][1])) == policy_reply(policy)


def test_responses_consult_the_respond_hook_first() -> None:
    def respond(body: dict[str, Any]) -> str | None:
        return "scripted" if body["model"] == "scripted-model" else None

    with FakeOpenAI(respond=respond) as server:
        replies = post_all(
            server, [("/responses", responses(grader_prompt(0), m)) for m in ("scripted-model", "gpt-4.1")]
        )
    assert [output_text(json.loads(raw)) for _, raw in replies] == [
        "scripted",
        verdict_reply(prompt_verdict(grader_prompt(0))),
    ]


def test_the_path_of_every_model_request_is_recorded() -> None:
    with FakeOpenAI() as server:
        assert server.base_url is not None
        root = server.base_url.removesuffix("/v1")
        requests = [("/chat/completions", chat("a")), ("/responses", responses("b")), ("/responses", {"model": "m"})]
        post_all(server, requests)

        async def unprefixed() -> int:
            async with (
                aiohttp.ClientSession() as session,
                session.post(root + "/responses", json=responses("c")) as resp,
            ):
                return resp.status

        assert asyncio.run(unprefixed()) == 200
        assert server.paths == ["/v1/chat/completions", "/v1/responses", "/v1/responses", "/responses"]
        assert server.bodies == [body for _, body in requests] + [responses("c")]
        assert server.responses_by_kind == {"ok": 3, "bad_request": 1}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "gpt-4.1"}, "input"),
        ({"model": "gpt-4.1", "input": []}, "input"),
        ({"model": "gpt-4.1", "input": 7}, "input"),
        ({"model": "gpt-4.1", "input": [{"role": "robot", "content": "hi"}]}, "input[0]"),
        ({"model": "gpt-4.1", "input": ["hi", {"role": "user", "content": [{"type": "input_image"}]}]}, "input[0]"),
        (
            {
                "model": "gpt-4.1",
                "input": [{"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "input_image"}]}],
            },
            "input[1]",
        ),
    ],
)
def test_a_missing_or_malformed_input_is_a_400(body: dict[str, Any], param: str) -> None:
    with FakeOpenAI() as server:
        status, reply = post_one(server, "/responses", body)
        assert server.responses_by_kind == {"bad_request": 1}
    assert status == 400
    assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["param"] == param


_TEMPERATURE = (
    "Unsupported value: 'temperature' does not support 0.5 with this model. Only the default (1) value is supported."
)
REFUSALS = [
    ("/chat/completions", chat("x", "o3", temperature=0.5), _TEMPERATURE, "temperature", "unsupported_value"),
    (
        "/chat/completions",
        chat("x", "gpt-5", temperature=0),
        _TEMPERATURE.replace("0.5", "0"),
        "temperature",
        "unsupported_value",
    ),
    (
        "/chat/completions",
        chat("x", "gpt-5.4-2026-03-05", max_tokens=10),
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
        "max_tokens",
        "unsupported_parameter",
    ),
    (
        "/chat/completions",
        chat("x", "o4-mini", reasoning_effort="extreme"),
        "Unsupported value: 'reasoning_effort' does not support \"extreme\" with this model. "
        "Supported values are: 'none', 'minimal', 'low', 'medium', 'high', and 'xhigh'.",
        "reasoning_effort",
        "unsupported_value",
    ),
    (
        "/chat/completions",
        chat("x", "gpt-4.1", reasoning_effort="low"),
        "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
        "reasoning_effort",
        "unsupported_parameter",
    ),
    (
        "/responses",
        chat("x", "gpt-5.4"),
        "Unsupported parameter: 'messages'. In the Responses API, this parameter has moved to 'input'.",
        "messages",
        "unsupported_parameter",
    ),
    *[
        (
            "/responses",
            responses("x", "gpt-5.4", **{key: value}),
            f"Unsupported parameter: '{key}'.",
            key,
            "unsupported_parameter",
        )
        for key, value in [
            ("max_tokens", 10),
            ("max_completion_tokens", 10),
            ("reasoning_effort", "low"),
            ("response_format", {"type": "json_object"}),
            ("n", 1),
            ("stop", ["\n"]),
        ]
    ],
    ("/responses", responses("x", "o1", temperature=0.5), _TEMPERATURE, "temperature", "unsupported_value"),
    (
        "/responses",
        responses("x", "gpt-4.1", reasoning={"effort": "low"}),
        "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
        "reasoning.effort",
        "unsupported_parameter",
    ),
]


@pytest.mark.parametrize(("path", "body", "message", "param", "code"), REFUSALS)
def test_what_openai_refuses_is_refused_unless_strict_params_is_off(
    path: str, body: dict[str, Any], message: str, param: str, code: str
) -> None:
    with FakeOpenAI() as server:
        status, reply = post_one(server, path, body)
        assert server.responses_by_kind == {"bad_request": 1}
    assert status == 400
    assert reply == {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    with FakeOpenAI(strict_params=False) as lenient:
        if "messages" in body and path == "/responses":
            body = {**body, "input": body["messages"]}
        status, reply = post_one(lenient, path, body)
        assert lenient.responses_by_kind == {"ok": 1}
    assert status == 200, reply


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/chat/completions", chat("x", "o3", temperature=1, max_completion_tokens=100, reasoning_effort="low")),
        ("/chat/completions", chat("x", "gpt-5.4", reasoning_effort="none")),
        ("/chat/completions", chat("x", "gpt-4.1", temperature=0.5, max_tokens=100)),
        ("/chat/completions", chat("x", "gpt-4o", temperature=0)),
        (
            "/responses",
            responses("x", "gpt-5.4", reasoning={"effort": "low"}, max_output_tokens=100, instructions="Grade."),
        ),
        ("/responses", responses("x", "gpt-4.1", temperature=0.5)),
    ],
)
def test_what_openai_takes_is_answered(path: str, body: dict[str, Any]) -> None:
    with FakeOpenAI() as server:
        status, reply = post_one(server, path, body)
    assert status == 200, reply


def test_a_refusal_comes_before_rate_limiting_and_faults() -> None:
    with FakeOpenAI(rate_limit=0.001, fault_rate=1.0, faults=["500"]) as server:
        replies = post_all(
            server, [("/responses", responses("x", "o3", temperature=0))] * 3 + [("/responses", responses("x"))] * 2
        )
        assert server.responses_by_kind == {"bad_request": 3, "500": 1, "rate_limited": 1}
    assert [status for status, _ in replies] == [400, 400, 400, 500, 429]


@pytest.mark.parametrize("kind", ["null", "empty", "prose", "string_verdict"])
def test_responses_faults_that_answer_200(kind: str) -> None:
    with FakeOpenAI(fault_rate=1.0, faults=[kind]) as server:
        status, reply = post_one(server, "/responses", responses(grader_prompt(0), "gpt-5.4"))
        assert server.responses_by_kind == {kind: 1}
    assert status == 200 and reply["object"] == "response"
    text = output_text(reply)
    if kind == "null":
        assert text is None and reply["output"][-1]["content"] == []
    elif kind == "empty":
        assert text == ""
    else:
        assert text is not None and text != verdict_reply(prompt_verdict(grader_prompt(0)))
        assert (kind == "string_verdict") == text.startswith("```json")


def test_responses_badjson_and_error_faults() -> None:
    with FakeOpenAI(fault_rate=1.0, faults=["badjson"]) as server:
        [(status, raw)] = post_all(server, [("/responses", responses("x"))])
    assert status == 200 and raw.startswith(b'{"id": "resp_fake"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    with FakeOpenAI(fault_rate=1.0, faults=["503"]) as server:
        status, reply = post_one(server, "/responses", responses("x"))
    assert status == 503 and reply["error"]["type"] == "server_error"
