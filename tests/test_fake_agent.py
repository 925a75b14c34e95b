"""The fake as a model that calls tools: offered `answer`, it calls it with a reply computed from the prompt, in
Chat Completions' and the Responses API's shapes, read back by OpenAI's own client; then it answers in text."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from healthbench.testing import FakeOpenAI, policy_reply
from healthbench.testing.agent import answer_reply

openai = pytest.importorskip("openai")

PARAMETERS = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
CHAT_TOOLS: list[Any] = [{"type": "function", "function": {"name": "answer", "parameters": PARAMETERS}}]
RESPONSES_TOOLS: list[Any] = [{"type": "function", "name": "answer", "parameters": PARAMETERS}]
OTHER_TOOLS: list[Any] = [{"type": "function", "function": {"name": "search", "parameters": PARAMETERS}}]


def test_chat_completions_call_answer_then_reply_in_text(fake: FakeOpenAI) -> None:
    prompt = "I have a headache.\n\nSend your reply with `answer`."

    async def run() -> list[Any]:
        client = openai.AsyncOpenAI(api_key="sk-fake", base_url=fake.base_url)
        try:
            messages: list[Any] = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": prompt}]
            first = await client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS)
            call = first.choices[0].message.tool_calls[0]
            messages += [first.choices[0].message.model_dump(exclude_none=True)]
            messages += [{"role": "tool", "tool_call_id": call.id, "content": "Graded."}]
            second = await client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS)
            parts = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
            as_parts = await client.chat.completions.create(model="m", messages=parts, tools=CHAT_TOOLS)
            other = await client.chat.completions.create(model="m", messages=messages[:2], tools=OTHER_TOOLS)
            return [first, second, as_parts, other, messages[:2]]
        finally:
            await client.close()

    first, second, as_parts, other, asked = asyncio.run(run())
    assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.content is None
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "answer"
    assert json.loads(call.function.arguments) == {"response": answer_reply(prompt)}
    assert as_parts.choices[0].message.tool_calls[0].function.arguments == call.function.arguments
    assert second.choices[0].message.tool_calls is None and second.choices[0].message.content
    # A request that offers no `answer` gets the plain reply it always got.
    assert other.choices[0].message.content == policy_reply(asked) and other.choices[0].message.tool_calls is None


def test_the_responses_api_calls_answer_then_replies_in_text(fake: FakeOpenAI) -> None:
    prompt = "My child has a fever."

    async def run() -> list[Any]:
        client = openai.AsyncOpenAI(api_key="sk-fake", base_url=fake.base_url)
        try:
            items: list[Any] = [{"role": "user", "content": prompt}]
            first = await client.responses.create(model="m", input=items, tools=RESPONSES_TOOLS, instructions="Go.")
            [call] = [item for item in first.output if item.type == "function_call"]
            items += [call.model_dump(exclude_none=True)]
            items += [{"type": "function_call_output", "call_id": call.call_id, "output": "Graded."}]
            second = await client.responses.create(model="m", input=items, tools=RESPONSES_TOOLS)
            return [first, call, second]
        finally:
            await client.close()

    first, call, second = asyncio.run(run())
    assert [item.type for item in first.output] == ["function_call"]
    assert call.name == "answer" and json.loads(call.arguments) == {"response": answer_reply(prompt)}
    assert [item.type for item in second.output] == ["message"] and second.output_text


def test_a_streamed_answer_is_the_unstreamed_one_in_chunks(fake: FakeOpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": "Is a fever of 39 C dangerous?"}]

    async def run() -> list[Any]:
        client = openai.AsyncOpenAI(api_key="sk-fake", base_url=fake.base_url)
        try:
            plain = await client.chat.completions.create(model="m", messages=messages)
            options = {"include_usage": True}
            stream = await client.chat.completions.create(
                model="m", messages=messages, stream=True, stream_options=options
            )
            chunks = [chunk async for chunk in stream]
            called = await client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS, stream=True)
            return [plain, chunks, [chunk async for chunk in called]]
        finally:
            await client.close()

    plain, chunks, called = asyncio.run(run())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content == policy_reply(messages)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == plain.usage.total_tokens
    [call] = [t for c in called if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert call.function.name == "answer"
    assert json.loads(call.function.arguments) == {"response": answer_reply(messages[0]["content"])}
    assert called[-1].choices[0].finish_reason == "tool_calls"
