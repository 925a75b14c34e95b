"""What the fake server answers: verdicts, policy replies, error bodies and response payloads.

Every reply is a pure function of the request, so a test can compute the answer it expects.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web

__all__ = [
    "GRADER_MARKER",
    "Body",
    "chat_completion",
    "error",
    "error_body",
    "estimate_tokens",
    "json_error",
    "policy_reply",
    "prompt_verdict",
    "response_object",
    "verdict_reply",
]

GRADER_MARKER = "# Rubric item"

PROSE = "The response seems reasonable overall and I would say it mostly meets the criterion."
STRING_VERDICT = '```json\n{"explanation": "fake verdict", "criteria_met": "true"}\n```'
# Built once: every grader request needs one of these two strings.
_VERDICT_REPLIES = {
    met: "```json\n" + json.dumps({"explanation": "fake verdict", "criteria_met": met}) + "\n```"
    for met in (True, False)
}
# Truncated mid-document, as a proxy cutting the body short would leave it.
BAD_JSON = '{"id": "chatcmpl-fake", "object": "chat.completion", "choices": [{"index": 0, "mess'
BAD_RESPONSE_JSON = '{"id": "resp_fake", "object": "response", "status": "completed", "output": [{"type": "mess'

Body = dict[str, Any]


def prompt_verdict(text: str) -> bool:
    """Return the default ``criteria_met`` verdict for a grader prompt: a pure function of its text."""
    return hashlib.sha256(text.encode()).digest()[0] % 2 == 0


def verdict_reply(criteria_met: bool, explanation: str | None = None) -> str:
    """Return a grader reply in the HealthBench format (a markdown-fenced JSON object)."""
    if explanation is None:
        return _VERDICT_REPLIES[criteria_met]
    return "```json\n" + json.dumps({"explanation": explanation, "criteria_met": criteria_met}) + "\n```"


def policy_reply(messages: Sequence[Any]) -> str:
    """Return the default reply to a non-grader (policy) request: a hash of its messages."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    return "Fake reply " + digest[:16]


def estimate_tokens(chars: int) -> int:
    """A deterministic token count for ``chars`` characters of text."""
    return chars // 4 + 1


def error_body(message: str, error_type: str, param: str | None = None, code: str | None = None) -> Body:
    """An error object in OpenAI's shape."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error(status: int, message: str, error_type: str, headers: dict[str, str] | None = None) -> web.Response:
    """An HTTP error answer carrying ``error_body(message, error_type)``."""
    return json_error(status, error_body(message, error_type), headers)


def json_error(status: int, body: Body, headers: dict[str, str] | None = None) -> web.Response:
    """An HTTP error answer carrying an error object already built."""
    return web.Response(status=status, text=json.dumps(body), content_type="application/json", headers=headers)


def chat_completion(body: Body, input_chars: int, content: str | None, serial: str, reasoning_tokens: int) -> Body:
    """A chat.completion object answering ``body``: shared by live requests and batch lines.

    ``completion_tokens`` includes the reasoning tokens, as OpenAI counts them.
    """
    prompt_tokens = estimate_tokens(input_chars)
    completion_tokens = estimate_tokens(len(content or "")) + reasoning_tokens
    return {
        "id": f"chatcmpl-{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        },
    }


def response_object(
    body: Body, input_chars: int, content: str | None, serial: str, reasoning_tokens: int, reasoning: bool
) -> Body:
    """A Responses API ``response`` answering ``body``, as the raw HTTP API has it (no ``output_text``).

    A reasoning model's answer opens with a reasoning item; ``content`` None leaves the message
    with no output_text part at all. ``output_tokens`` includes the reasoning tokens.
    """
    parts = [] if content is None else [{"type": "output_text", "text": content, "annotations": []}]
    message = {"type": "message", "id": f"msg_{serial}", "status": "completed", "role": "assistant", "content": parts}
    output: list[Body] = [{"type": "reasoning", "id": f"rs_{serial}", "summary": []}] if reasoning else []
    input_tokens = estimate_tokens(input_chars)
    output_tokens = estimate_tokens(len(content or "")) + reasoning_tokens
    return {
        "id": f"resp_{serial}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": body.get("model", "fake-model"),
        "output": [*output, message],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": input_tokens + output_tokens,
        },
    }
