"""The fake as the model a harness drives: it calls the `answer` tool, and it streams.

Offered a function tool named `answer` (OpenReward's answer-tool environment) in a conversation that has no tool
result yet, the fake calls `answer` with a reply instead of writing one: Chat Completions' `tool_calls`, or the
Responses API's `function_call` output item. Once a tool result is in the conversation it answers in plain text,
as a model does after its last tool call. The reply is a pure function of the last user turn's text (the task's
prompt), so a test can compute what was submitted and grade it with `healthbench grade`.

Asked for a streamed Chat Completions answer (`"stream": true`, as verifiers' chat program asks behind its
interception server), it sends the answer it would give unstreamed, cut into the chunks OpenAI sends: the role,
the content or the tool calls, the finish reason, the usage when asked for, `[DONE]`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from healthbench.testing.replies import Body

__all__ = ["ANSWER_TOOL", "ToolCall", "answer_call", "answer_reply", "chat_stream", "wants_stream", "with_tool_call"]

ANSWER_TOOL = "answer"
# What a tool result looks like in each API's conversation.
_TOOL_RESULT_ROLE = "tool"
_TOOL_RESULT_ITEM = "function_call_output"


@dataclass(frozen=True)
class ToolCall:
    """One function call the fake makes: the tool's name and its JSON arguments."""

    name: str
    arguments: str


def answer_reply(prompt: str) -> str:
    """The reply the fake sends through `answer` for the last user turn's text `prompt`."""
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    return f"Answer {digest}: rest, drink fluids, and see a doctor today if it gets worse."


def _text(content: Any) -> str | None:
    """A message's text: a string, or the text parts of a content list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [text for p in content if isinstance(p, dict) and isinstance(text := p.get("text"), str)]
        return "".join(texts) if texts else None
    return None


def _offers_answer(body: Body) -> bool:
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and tool.get("type") == "function":
            # Chat Completions nests the function; the Responses API does not.
            function = tool.get("function", tool)
            if isinstance(function, dict) and function.get("name") == ANSWER_TOOL:
                return True
    return False


def answer_call(body: Body, items: list[Body]) -> ToolCall | None:
    """The `answer` call the fake makes for a request with conversation `items` (chat messages or Responses
    input items), or None when it offers no `answer` tool, already holds a tool result, or has no user text."""
    if not _offers_answer(body):
        return None
    if any(i.get("role") == _TOOL_RESULT_ROLE or i.get("type") == _TOOL_RESULT_ITEM for i in items):
        return None
    users = [text for i in items if i.get("role") == "user" and (text := _text(i.get("content"))) is not None]
    if not users:
        return None
    return ToolCall(ANSWER_TOOL, json.dumps({"response": answer_reply(users[-1])}))


def with_tool_call(payload: Body, call: ToolCall, serial: str) -> Body:
    """`payload` (a chat completion or a Responses API response with no text) carrying `call` instead."""
    call_id = f"call_{serial}"
    if payload.get("object") == "chat.completion":
        function = {"name": call.name, "arguments": call.arguments}
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }
        choice = {**payload["choices"][0], "message": message, "finish_reason": "tool_calls"}
        return {**payload, "choices": [choice]}
    item = {
        "type": "function_call",
        "id": f"fc_{serial}",
        "call_id": call_id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    }
    output = [o for o in payload["output"] if o.get("type") != "message"]
    return {**payload, "output": [*output, item]}


def wants_stream(body: Body) -> bool:
    """Whether a Chat Completions request asks for a streamed answer."""
    return body.get("stream") is True


def chat_stream(payload: Body, body: Body) -> str:
    """The server-sent events that stream the chat completion `payload` answering `body`."""
    head = {key: payload[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    [choice] = payload["choices"]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> Body:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("content") is not None:
        chunks.append(chunk({"content": message["content"]}))
    if message.get("tool_calls"):
        chunks.append(chunk({"tool_calls": [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        chunks.append({**head, "choices": [], "usage": payload["usage"]})
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
