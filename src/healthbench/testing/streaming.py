"""Chat Completions' streamed answer (`"stream": true`), for clients that only stream: verifiers' chat program,
behind its interception server, is one. The answer is the one the fake would give unstreamed, cut into the chunks
OpenAI sends: the role, the content or the tool calls, the finish reason, the usage when asked for, `[DONE]`.
"""

from __future__ import annotations

import json
from typing import Any

from healthbench.testing.replies import Body

__all__ = ["chat_stream", "wants_stream"]


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
