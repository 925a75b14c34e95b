"""The shapes of requests and answers: Chat Completions and the Responses API, reasoning models or not.

One `Shape` says how a model is asked (which API, which sampling settings it takes) and builds the request
body; its `Api` says where the request goes and how its answer is read. The grader, the policy, the Batch
API path and the dry run all build requests here, so a model is asked the same way by each of them.

OpenAI's reasoning models (o-series, gpt-5 and later) refuse a `temperature` other than the default and
refuse `max_tokens`; they take a reasoning effort instead, and an output cap only under another name
(`max_completion_tokens` in Chat Completions, `max_output_tokens` in the Responses API).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from healthbench.errors import InvalidResponse, SettingsError, UnreadableAnswer

ApiName = Literal["chat", "responses"]
Effort = Literal["minimal", "low", "medium", "high"]
EFFORTS: tuple[Effort, ...] = ("minimal", "low", "medium", "high")

_REASONING = re.compile(r"^(o\d|gpt-5)")
_RESPONSES_ROLES = {"system": "developer"}


def is_reasoning_model(model: str) -> bool:
    """Whether OpenAI treats a model of this name as a reasoning model (o1, o3, o4-mini, gpt-5, gpt-5.4-...)."""
    return bool(_REASONING.match(model))


@dataclass
class Usage:
    """Token usage summed over calls, in the units providers bill.

    `batch` marks usage billed at Batch API prices. One session sends each side (policy, grader) one way
    only, so a sum keeps the mark of the calls in it; a run that mixed ways across sessions is split by
    the store when it is priced. `completion_tokens` include the reasoning tokens, as OpenAI bills them.
    `wire_microseconds` is the time the answered live attempts spent on the wire (request sent to answer read;
    no wait for a place in the budget, no backoff), whole microseconds so the numbers stay integers: what
    `healthbench judges` reports as a grader's latency. `unmetered` counts the calls whose answers carried no
    usage (some hosts send none): their tokens are not known, so neither is the cost of a sum that holds one.
    """

    calls: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    batch: bool = False
    wire_microseconds: int = 0
    unmetered: int = 0

    def add(self, other: Usage) -> None:
        """Add another usage into this one."""
        if other.calls:
            self.batch = self.batch or other.batch
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.cached_prompt_tokens += other.cached_prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.wire_microseconds += other.wire_microseconds
        self.unmetered += other.unmetered

    def as_dict(self) -> dict[str, int]:
        """Plain numbers for JSON output; `"batch": 1` only for batch-priced usage, `wire_microseconds` only when
        timed (so the verdict store keeps a call's latency for a resumed run), `unmetered` only when some call's
        usage is unknown."""
        numbers = {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }
        if self.wire_microseconds:
            numbers["wire_microseconds"] = self.wire_microseconds
        if self.unmetered:
            numbers["unmetered"] = self.unmetered
        return numbers | {"batch": 1} if self.batch else numbers

    @classmethod
    def from_dict(cls, numbers: Mapping[str, Any]) -> Usage:
        """The inverse of `as_dict`."""
        return cls(**{**numbers, "batch": bool(numbers.get("batch"))})


def _count(value: Any) -> int:
    return int(value or 0) if isinstance(value, int | float) else 0


def _usage(usage: Any, names: tuple[str, str, str, str, str, str], batch: bool) -> Usage:
    """A usage object read by field names: (prompt, prompt details, cached, completion, its details, reasoning)."""
    if not isinstance(usage, dict):
        return Usage(calls=1, batch=batch, unmetered=1)
    prompt, prompt_details, cached, completion, completion_details, reasoning = names
    prompt_extra = usage.get(prompt_details)
    completion_extra = usage.get(completion_details)
    prompt_extra = prompt_extra if isinstance(prompt_extra, dict) else {}
    completion_extra = completion_extra if isinstance(completion_extra, dict) else {}
    return Usage(
        calls=1,
        prompt_tokens=_count(usage.get(prompt)),
        cached_prompt_tokens=_count(prompt_extra.get(cached)),
        completion_tokens=_count(usage.get(completion)),
        reasoning_tokens=_count(completion_extra.get(reasoning)),
        batch=batch,
    )


_CHAT_USAGE = (
    "prompt_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "completion_tokens",
    "completion_tokens_details",
    "reasoning_tokens",
)
_RESPONSES_USAGE = (
    "input_tokens",
    "input_tokens_details",
    "cached_tokens",
    "output_tokens",
    "output_tokens_details",
    "reasoning_tokens",
)


def _decode(body: bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    try:
        payload = json.loads(body) if isinstance(body, bytes) else body
    except ValueError:
        raise UnreadableAnswer("not JSON") from None
    if not isinstance(payload, Mapping):
        raise UnreadableAnswer("not a JSON object")
    return payload


@dataclass(frozen=True)
class Reading:
    """An answer as read: its text, its usage, whether the output cap ended it (`cut`: Chat Completions'
    `finish_reason` "length", a response left `incomplete` at `max_output_tokens`), and the thinking a host put in
    a field of its own (`reasoning_content`, or `reasoning`: vLLM, SGLang, Ollama, OpenRouter), which is never part
    of the text; its tokens are in the usage where the host counts them."""

    content: str
    usage: Usage
    cut: bool = False
    reasoning: str | None = None


# The fields hosts put a reasoning model's thinking in, beside the answer: vLLM's and SGLang's reasoning parsers
# (`reasoning_content`, `reasoning` in later vLLM), Ollama and OpenRouter (`reasoning`).
_REASONING_FIELDS = ("reasoning_content", "reasoning")


def chat_reading(body: bytes | Mapping[str, Any], *, batch: bool = False) -> Reading:
    """A chat-completion answer (bytes, or already parsed) as read: its message's content and the rest."""
    payload = _decode(body)
    try:
        choice = payload["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise UnreadableAnswer("no choices[0].message") from None
    content = message.get("content") if isinstance(message, Mapping) else None
    cut = isinstance(choice, Mapping) and choice.get("finish_reason") == "length"
    thought = [message.get(name) for name in _REASONING_FIELDS] if isinstance(message, Mapping) else []
    reasoning = next((text for text in thought if isinstance(text, str) and text), None)
    usage = _usage(payload.get("usage"), _CHAT_USAGE, batch)
    # An empty string is a reply (a policy may give one, and the reference accepts it); a missing one is not,
    # unless the cap ended the answer before it began (while the model was thinking, say): that is the cap's doing.
    if not isinstance(content, str):
        if cut:
            return Reading("", usage, cut, reasoning)
        raise InvalidResponse("no content in the message")
    return Reading(content, usage, cut, reasoning)


def chat_content(body: bytes | Mapping[str, Any], *, batch: bool = False) -> tuple[str, Usage]:
    """The message content and usage of a chat-completion answer (bytes, or already parsed)."""
    reading = chat_reading(body, batch=batch)
    return reading.content, reading.usage


def responses_reading(body: bytes | Mapping[str, Any], *, batch: bool = False) -> Reading:
    """A Responses API answer as read: the `output_text` parts of its `message` outputs, joined, as the SDK's
    `output_text` joins them (the raw API has no such field), and the rest."""
    payload = _decode(body)
    output = payload.get("output")
    if not isinstance(output, list):
        raise UnreadableAnswer("no output list")
    if payload.get("status") == "failed":
        raise InvalidResponse(f"the response failed: {json.dumps(payload.get('error'))[:200]}")
    details = payload.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    cut = payload.get("status") == "incomplete" and reason == "max_output_tokens"
    usage = _usage(payload.get("usage"), _RESPONSES_USAGE, batch)
    parts = [
        part.get("text")
        for item in output
        if isinstance(item, dict) and item.get("type") == "message" and isinstance(item.get("content"), list)
        for part in item["content"]
        if isinstance(part, dict) and part.get("type") == "output_text"
    ]
    texts = [text for text in parts if isinstance(text, str)]
    if not texts or len(texts) != len(parts):
        if cut:
            return Reading("", usage, cut)
        raise InvalidResponse("no output_text in the response")
    return Reading("".join(texts), usage, cut)


def responses_content(body: bytes | Mapping[str, Any], *, batch: bool = False) -> tuple[str, Usage]:
    """The text and usage of a Responses API answer (see `responses_reading`)."""
    reading = responses_reading(body, batch=batch)
    return reading.content, reading.usage


@dataclass(frozen=True)
class Api:
    """An endpoint kind: where its requests go, live and in batch lines, and how its answers are read."""

    name: ApiName
    path: str
    reading: Callable[..., Reading]

    def read(self, body: bytes | Mapping[str, Any], *, batch: bool = False) -> tuple[str, Usage]:
        """An answer's text and usage."""
        reading = self.reading(body, batch=batch)
        return reading.content, reading.usage

    @property
    def batch_url(self) -> str:
        """The `url` of a Batch API line, and the batch's `endpoint`."""
        return "/v1" + self.path


CHAT = Api("chat", "/chat/completions", chat_reading)
RESPONSES = Api("responses", "/responses", responses_reading)
APIS: dict[ApiName, Api] = {"chat": CHAT, "responses": RESPONSES}


@dataclass(frozen=True)
class Shape:
    """How one model is asked: through which API, and with which of the settings its kind accepts.

    A model that is not a reasoning model gets `temperature` and its output cap as `max_tokens` (Chat) or
    `max_output_tokens` (Responses), when given. A reasoning model gets neither a temperature nor
    `max_tokens`: its effort (`reasoning_effort`, or `reasoning.effort`) and, only when a cap is set,
    `max_completion_tokens` or `max_output_tokens`.
    """

    api: ApiName = "chat"
    reasoning: bool = False
    temperature: float | None = None
    max_output_tokens: int | None = None
    effort: Effort | None = None

    def __post_init__(self) -> None:
        if self.reasoning and self.temperature is not None:
            raise SettingsError("a reasoning model takes no temperature")
        if not self.reasoning and self.effort is not None:
            raise SettingsError("a reasoning effort needs a reasoning model")

    @property
    def endpoint(self) -> Api:
        """The API the requests of this shape go to."""
        return APIS[self.api]

    def body(self, model: str, messages: Sequence[Mapping[str, str]]) -> dict[str, Any]:
        """The request body for `messages` (role and content each); key order is fixed, since the exact bytes
        are what is sent, cached and put in batch lines."""
        if self.api == "chat":
            body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages]}
            if self.reasoning:
                self._put(body, "max_completion_tokens", self.max_output_tokens)
                self._put(body, "reasoning_effort", self.effort)
            else:
                self._put(body, "temperature", self.temperature)
                self._put(body, "max_tokens", self.max_output_tokens)
            return body
        # The Responses API names the instructions role `developer`, as the reference's sampler sends it.
        turns = [{"role": _RESPONSES_ROLES.get(m["role"], m["role"]), "content": m["content"]} for m in messages]
        body = {"model": model, "input": turns}
        if self.reasoning:
            if self.effort is not None:
                body["reasoning"] = {"effort": self.effort}
            self._put(body, "max_output_tokens", self.max_output_tokens)
        else:
            self._put(body, "temperature", self.temperature)
            self._put(body, "max_output_tokens", self.max_output_tokens)
        return body

    @staticmethod
    def _put(body: dict[str, Any], key: str, value: Any) -> None:
        if value is not None:
            body[key] = value

    def describe(self) -> dict[str, Any]:
        """The settings, for run.json and the dry run."""
        return {
            "api": self.api,
            "reasoning": self.reasoning,
            "reasoning_effort": self.effort,
            "temperature": self.temperature,
            "max_output_tokens": self.max_output_tokens,
        }


def with_cache_key(payload: bytes, cache_key: str) -> bytes:
    """A request's JSON bytes with `"prompt_cache_key"` added as the body's last field: byte for byte what
    `json.dumps` gives for the body with that field added, and every other byte as it was."""
    if not payload.endswith(b"}"):
        raise SettingsError("a request body is a JSON object")
    return payload[:-1] + b', "prompt_cache_key": ' + json.dumps(cache_key).encode() + b"}"


def request_key(payload: bytes) -> str:
    """The digest of the exact bytes of a request: equal requests, equal keys."""
    return hashlib.sha256(payload).hexdigest()
