"""The two model endpoints the fake answers, Chat Completions and the Responses API.

Each reads a request body into a ``Prompt`` (or the 400 OpenAI would answer it with) and builds
its answer payload; live requests and batch lines share them, so both answer alike.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from healthbench.testing.params import chat_refusal, is_reasoning_model, reasoning_tokens, responses_refusal
from healthbench.testing.replies import (
    BAD_JSON,
    BAD_RESPONSE_JSON,
    GRADER_MARKER,
    Body,
    chat_completion,
    error_body,
    response_object,
)

__all__ = ["CHAT", "ENDPOINTS", "RESPONSES", "Endpoint", "Prompt", "endpoint_for"]

_BAD_REQUEST = "invalid_request_error"
_ROLES = ("user", "assistant", "system", "developer")
_TEXT_PARTS = ("input_text", "output_text")  # an assistant turn sent back as input carries output_text
# A tool-calling conversation's other input items, by the field that holds their text.
_TOOL_ITEMS = {"function_call": "arguments", "function_call_output": "output"}


@dataclass(frozen=True)
class Prompt:
    """What the answer to a valid model request depends on."""

    items: list[Body]  # the chat messages, or the input items (a string input as one user item)
    text: str | None  # where a grader prompt is recognised: the last message's or last user item's text
    input_chars: int
    reasoning_tokens: int
    input_text: str = ""  # every input text in order, joined: what a prompt cache compares

    @property
    def grader_prompt(self) -> str | None:
        """The grader prompt, if this is a grader request (its text carries the rubric-item marker; a per-reply
        prompt's heading carries it too)."""
        return self.text if self.text is not None and GRADER_MARKER in self.text else None


class Endpoint(ABC):
    """One model endpoint: how it reads a body and what it answers."""

    path: str  # with the /v1 prefix, as batch lines name it
    bad_json: str  # the body the "badjson" fault sends, cut short

    @abstractmethod
    def read(self, body: Any, strict: bool) -> Prompt | Body:
        """The request's prompt, or the error object of the 400 it gets (OpenAI's rules when ``strict``)."""

    @abstractmethod
    def payload(self, body: Body, prompt: Prompt, content: str | None, serial: str, cached_tokens: int = 0) -> Body:
        """The answer carrying ``content`` (None: no text at all); ``serial`` makes its ids; ``cached_tokens`` of
        its prompt were read from the prompt cache."""


class _Chat(Endpoint):
    path = "/v1/chat/completions"
    bad_json = BAD_JSON

    def read(self, body: Any, strict: bool) -> Prompt | Body:
        if not isinstance(body, dict):
            return error_body("'messages' must be a non-empty list of objects", _BAD_REQUEST)
        if strict and (refusal := chat_refusal(body)) is not None:
            return refusal
        messages = body.get("messages")
        if not (isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages)):
            return error_body("'messages' must be a non-empty list of objects", _BAD_REQUEST)
        last = messages[-1].get("content")
        texts = [c for m in messages if isinstance(c := m.get("content"), str)]
        return Prompt(
            items=messages,
            text=last if isinstance(last, str) else None,
            input_chars=sum(map(len, texts)),
            reasoning_tokens=reasoning_tokens(body.get("model"), body.get("reasoning_effort")),
            input_text="".join(texts),
        )

    def payload(self, body: Body, prompt: Prompt, content: str | None, serial: str, cached_tokens: int = 0) -> Body:
        return chat_completion(body, prompt.input_chars, content, serial, prompt.reasoning_tokens, cached_tokens)


def _item_text(item: Any) -> str | None:
    """The text of one input item (a message, or a tool call or its result: see ``agent``), or None if it is
    not an item the Responses API takes."""
    if isinstance(item, dict) and (field := _TOOL_ITEMS.get(str(item.get("type")))) is not None:
        value = item.get(field)
        return value if isinstance(value, str) else None
    if not isinstance(item, dict) or item.get("type", "message") != "message" or item.get("role") not in _ROLES:
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") in _TEXT_PARTS]
    if len(texts) != len(content) or not all(isinstance(t, str) for t in texts):
        return None
    return "".join(t for t in texts if isinstance(t, str))


def _input_error(message: str, param: str, code: str = "invalid_value") -> Body:
    return error_body(message, _BAD_REQUEST, param, code)


class _Responses(Endpoint):
    path = "/v1/responses"
    bad_json = BAD_RESPONSE_JSON

    def read(self, body: Any, strict: bool) -> Prompt | Body:
        if not isinstance(body, dict):
            return _input_error("The request body must be a JSON object.", "input")
        if strict and (refusal := responses_refusal(body)) is not None:
            return refusal
        raw = body.get("input")
        if raw is None:
            return _input_error("Missing required parameter: 'input'.", "input", "missing_required_parameter")
        items: list[Body] = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
        if not isinstance(items, list) or not items:
            return _input_error("Invalid 'input': expected a string or a non-empty array of messages.", "input")
        texts: list[str] = []
        for i, item in enumerate(items):
            text = _item_text(item)
            if text is None:
                message = (
                    f"Invalid 'input[{i}]': expected a message with 'role' one of {', '.join(_ROLES)} and "
                    "'content' a string or an array of input_text parts."
                )
                return _input_error(message, f"input[{i}]")
            texts.append(text)
        user_texts = [t for item, t in zip(items, texts, strict=True) if item.get("role") == "user"]
        instructions = body.get("instructions")
        reasoning = body.get("reasoning")
        return Prompt(
            items=items,
            text=user_texts[-1] if user_texts else None,
            input_chars=sum(map(len, texts)) + (len(instructions) if isinstance(instructions, str) else 0),
            reasoning_tokens=reasoning_tokens(
                body.get("model"), reasoning.get("effort") if isinstance(reasoning, dict) else None
            ),
            input_text=(instructions if isinstance(instructions, str) else "") + "".join(texts),
        )

    def payload(self, body: Body, prompt: Prompt, content: str | None, serial: str, cached_tokens: int = 0) -> Body:
        reasoning = is_reasoning_model(body.get("model"))
        tokens = prompt.reasoning_tokens
        return response_object(body, prompt.input_chars, content, serial, tokens, reasoning, cached_tokens)


CHAT: Endpoint = _Chat()
RESPONSES: Endpoint = _Responses()
ENDPOINTS: dict[str, Endpoint] = {e.path: e for e in (CHAT, RESPONSES)}


def endpoint_for(path: str) -> Endpoint:
    """The endpoint serving ``path``, with or without the ``/v1`` prefix."""
    return ENDPOINTS[path if path.startswith("/v1/") else "/v1" + path]
