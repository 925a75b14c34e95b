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
    "chat_messages",
    "error",
    "error_body",
    "estimate_tokens",
    "policy_reply",
    "prompt_verdict",
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

Body = dict[str, Any]


def prompt_verdict(text: str) -> bool:
    """Return the default ``criteria_met`` verdict for a grader prompt: a pure function of its text."""
    return hashlib.sha256(text.encode()).digest()[0] % 2 == 0


def verdict_reply(criteria_met: bool) -> str:
    """Return a grader reply in the HealthBench format (a markdown-fenced JSON object)."""
    return _VERDICT_REPLIES[criteria_met]


def policy_reply(messages: Sequence[Any]) -> str:
    """Return the default reply to a non-grader (policy) request: a hash of its messages."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    return "Fake reply " + digest[:16]


def estimate_tokens(chars: int) -> int:
    """A deterministic token count for ``chars`` characters of text."""
    return chars // 4 + 1


def error_body(message: str, error_type: str) -> Body:
    """An error object in OpenAI's shape, with no ``param`` or ``code``."""
    return {"error": {"message": message, "type": error_type, "param": None, "code": None}}


def error(status: int, message: str, error_type: str, headers: dict[str, str] | None = None) -> web.Response:
    """An HTTP error answer carrying ``error_body(message, error_type)``."""
    body = error_body(message, error_type)
    return web.Response(status=status, text=json.dumps(body), content_type="application/json", headers=headers)


def chat_messages(body: Any) -> list[Body] | None:
    """Return the request's messages, or None if they are not a non-empty list of objects."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
        return messages
    return None


def chat_completion(body: Body, messages: list[Body], content: str | None, completion_id: str) -> Body:
    """A chat.completion object answering ``body``: shared by live requests and batch lines."""
    prompt_tokens = estimate_tokens(sum(len(c) for m in messages if isinstance(c := m.get("content"), str)))
    completion_tokens = estimate_tokens(len(content or ""))
    return {
        "id": completion_id,
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
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }
