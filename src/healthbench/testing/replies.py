"""What the fake server answers: verdicts, policy replies, error bodies and response payloads.

Every reply is a pure function of the request, so a test can compute the answer it expects.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from healthbench.errors import SettingsError

__all__ = [
    "GRADER_MARKER",
    "LIST_FAULTS",
    "PER_REPLY_MARKER",
    "Body",
    "chat_completion",
    "error",
    "error_body",
    "estimate_tokens",
    "faulty_list",
    "item_verdict",
    "json_error",
    "per_reply_items",
    "policy_reply",
    "prompt_verdict",
    "response_object",
    "verdict_reply",
    "verdicts_reply",
]

GRADER_MARKER = "# Rubric item"
# A per-reply grader prompt (healthbench's `grader_template_per_reply.txt`): the conversation, then its items, each
# under `## Item N`, between these two headings (the last of each, so a conversation that holds them is passed).
PER_REPLY_MARKER = "\n\n# Rubric items\n"
_PER_REPLY_END = "\n\n# Final instruction\n"
_CONVERSATION = "\n# Conversation\n"
_ITEM_HEADING = re.compile(r"(?:^|\n\n)## Item (\d+)\n")
# Malformed answers to a per-reply prompt, on demand (`FakeOpenAI(list_fault=...)`): an id left out, an id twice,
# an id that is no item's, prose, an object instead of a list, a verdict that is a string.
LIST_FAULTS: tuple[str, ...] = ("missing", "repeated", "invented", "not_json", "not_list", "string_verdict")

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


def per_reply_items(text: str) -> tuple[str, list[tuple[int, str]]] | None:
    """The conversation and the numbered items (number, text) of a per-reply grader prompt, or None if ``text``
    is not one."""
    start, end = text.rfind(PER_REPLY_MARKER), text.rfind(_PER_REPLY_END)
    opening = text.find(_CONVERSATION)
    if start < 0 or end < start or not 0 <= opening < start:
        return None
    parts = _ITEM_HEADING.split(text[start + len(PER_REPLY_MARKER) : end])
    items = [(int(number), item) for number, item in zip(parts[1::2], parts[2::2], strict=True)]
    return text[opening + len(_CONVERSATION) : start], items


def item_verdict(conversation: str, item: str) -> bool:
    """The ``criteria_met`` the fake gives one item of a per-reply prompt: a pure function of the conversation
    and the item's text (not the per-item verdict, whose prompt is another)."""
    return prompt_verdict(conversation + "\n\n" + item)


def _fenced(value: Any) -> str:
    return "```json\n" + json.dumps(value, indent=2) + "\n```"


Verdicts = Sequence[tuple[int, bool, str]]


def verdicts_reply(verdicts: Verdicts) -> str:
    """A per-reply grader answer: a fenced JSON list with each item's id, verdict and explanation."""
    return _fenced([{"id": n, "explanation": why, "criteria_met": met} for n, met, why in verdicts])


def faulty_list(kind: str, verdicts: Verdicts) -> str:
    """A malformed per-reply answer of ``kind`` (one of ``LIST_FAULTS``) for these (id, verdict, explanation)."""
    entries = [{"id": n, "explanation": why, "criteria_met": met} for n, met, why in verdicts]
    if kind == "missing":
        return _fenced(entries[:-1])
    if kind == "repeated":
        return _fenced([*entries, entries[0]])
    if kind == "invented":
        return _fenced([*entries, {"id": len(entries) + 1, "explanation": "fake verdict", "criteria_met": True}])
    if kind == "not_json":
        return PROSE
    if kind == "not_list":
        return _fenced({"verdicts": entries})
    if kind == "string_verdict":
        return _fenced([{**entry, "criteria_met": str(entry["criteria_met"]).lower()} for entry in entries])
    raise SettingsError(f"unknown list fault {kind!r}; choose from {LIST_FAULTS}")


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


@dataclasses.dataclass(frozen=True)
class _AnswerTokens:
    """An answer's token counts, the same in both APIs, each of which names them its own way in its usage."""

    prompt: int
    output: int
    cached: int

    @property
    def total(self) -> int:
        return self.prompt + self.output


def _answer_tokens(input_chars: int, content: str | None, reasoning_tokens: int, cached_tokens: int) -> _AnswerTokens:
    """The prompt's tokens, the output's (its reasoning tokens included, as OpenAI counts them) and how many of the
    prompt's were read from the prompt cache (never more than it has)."""
    prompt = estimate_tokens(input_chars)
    output = estimate_tokens(len(content or "")) + reasoning_tokens
    return _AnswerTokens(prompt=prompt, output=output, cached=min(cached_tokens, prompt))


def chat_completion(
    body: Body, input_chars: int, content: str | None, serial: str, reasoning_tokens: int, cached_tokens: int = 0
) -> Body:
    """A chat.completion object answering ``body``: shared by live requests and batch lines.

    ``completion_tokens`` includes the reasoning tokens, as OpenAI counts them; ``cached_tokens`` of the prompt's
    were read from the prompt cache.
    """
    tokens = _answer_tokens(input_chars, content, reasoning_tokens, cached_tokens)
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
            "prompt_tokens": tokens.prompt,
            "completion_tokens": tokens.output,
            "total_tokens": tokens.total,
            "prompt_tokens_details": {"cached_tokens": tokens.cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        },
    }


def response_object(
    body: Body,
    input_chars: int,
    content: str | None,
    serial: str,
    reasoning_tokens: int,
    reasoning: bool,
    cached_tokens: int = 0,
) -> Body:
    """A Responses API ``response`` answering ``body``, as the raw HTTP API has it (no ``output_text``).

    A reasoning model's answer opens with a reasoning item; ``content`` None leaves the message
    with no output_text part at all. ``output_tokens`` includes the reasoning tokens.
    """
    parts = [] if content is None else [{"type": "output_text", "text": content, "annotations": []}]
    message = {"type": "message", "id": f"msg_{serial}", "status": "completed", "role": "assistant", "content": parts}
    output: list[Body] = [{"type": "reasoning", "id": f"rs_{serial}", "summary": []}] if reasoning else []
    tokens = _answer_tokens(input_chars, content, reasoning_tokens, cached_tokens)
    return {
        "id": f"resp_{serial}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": body.get("model", "fake-model"),
        "output": [*output, message],
        "usage": {
            "input_tokens": tokens.prompt,
            "input_tokens_details": {"cached_tokens": tokens.cached},
            "output_tokens": tokens.output,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": tokens.total,
        },
    }
