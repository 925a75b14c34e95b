"""The model under evaluation: any OpenAI-compatible chat-completions endpoint.

Requests mirror the reference sampler: an optional system message first, then the task's conversation,
with `temperature` and `max_tokens` when given. Reasoning models take no temperature and count
`max_completion_tokens`; they are recognised by name (o1, o3, o4, gpt-5 families) or by `--reasoning`.

A request the provider refuses because of the prompt itself (OpenAI's `invalid_prompt`, a content filter, a
context too long for the model) is the model's outcome, as the reference treats it: the sample is graded with
the reference's placeholder reply. A refusal of anything else (a parameter, the key, the model's name), or
refusals that are not the exception, are the caller's mistake, and the run stops.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from healthbench.api.client import OPENAI_BASE_URL, ApiClient, Completer, client_for
from healthbench.api.wire import Effort, Shape, Usage, is_reasoning_model
from healthbench.data.schema import Message
from healthbench.errors import PolicyMisuse, RequestFailed


def _reply(content: str) -> str:
    return content


class PolicyConfig(BaseModel):
    """How the evaluated model is called. The key is a secret and never serialised."""

    model_config = ConfigDict(frozen=True)

    model: str
    base_url: str = OPENAI_BASE_URL
    api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    system_message: str | None = None
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    reasoning: bool | None = None
    reasoning_effort: Effort | None = None
    concurrency: int = Field(default=32, ge=1)
    max_attempts: int = Field(default=12, ge=1)
    timeout: float = Field(default=600.0, gt=0)
    # The account's rate limits for the model, when the user knows them (else learned from the server).
    rpm: float | None = Field(default=None, gt=0)
    tpm: float | None = Field(default=None, gt=0)
    # `grade`: a refused prompt is graded with REFUSED_REPLY; `fail`: it is a sample that could not be graded.
    policy_errors: Literal["grade", "fail"] = "grade"

    @classmethod
    def from_env(cls, *, base_url: str | None = None, **values: Any) -> PolicyConfig:
        """Settings for the policy: URL from the flag or `OPENAI_BASE_URL`, key from `OPENAI_API_KEY`."""
        key = os.environ.get("OPENAI_API_KEY")
        return cls(
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL,
            api_key=SecretStr(key) if key else None,
            **{name: value for name, value in values.items() if value is not None},
        )

    @model_validator(mode="after")
    def _temperature_needs_a_chat_model(self) -> PolicyConfig:
        if self.is_reasoning and self.temperature is not None:
            raise ValueError(
                f"{self.model} is treated as a reasoning model, which takes no temperature; "
                "drop --temperature, or pass --no-reasoning to send it anyway"
            )
        return self

    @property
    def is_reasoning(self) -> bool:
        """Whether the model takes `max_completion_tokens` and no temperature."""
        return self.reasoning if self.reasoning is not None else is_reasoning_model(self.model)

    @property
    def shape(self) -> Shape:
        """How the model is asked: always through Chat Completions, the API every compatible server has."""
        if self.is_reasoning:
            return Shape("chat", True, None, self.max_tokens, self.reasoning_effort)
        return Shape("chat", False, self.temperature, self.max_tokens)

    def chat(self) -> ApiClient:
        """The live client for the model's endpoint: its key, concurrency, timeout and retry table."""
        return client_for(self)

    def identity(self) -> dict[str, Any]:
        """What decides the replies: recorded with a run, and compared on resume."""
        return self.model_dump(include={"model", "system_message", "temperature", "max_tokens", "reasoning_effort"}) | {
            "reasoning": self.is_reasoning
        }


class Policy:
    """Samples replies from the evaluated model, live, or through `wrap` (the Batch API, say)."""

    def __init__(self, config: PolicyConfig, wrap: Callable[[ApiClient], Completer] | None = None) -> None:
        self.config = config
        chat = config.chat()
        self.client: Completer = chat if wrap is None else wrap(chat)

    def messages(self, prompt: Sequence[Message]) -> list[Message]:
        """What the model is sent, which is also what the graded transcript starts with."""
        head = [Message(role="system", content=self.config.system_message)] if self.config.system_message else []
        return [*head, *prompt]

    def request_body(self, prompt: Sequence[Message]) -> dict[str, Any]:
        """The chat-completions body for one task."""
        return self.config.shape.body(self.config.model, [m.model_dump() for m in self.messages(prompt)])

    async def sample(self, prompt: Sequence[Message], *, ident: str | None = None) -> tuple[str, Usage]:
        """One reply; raises `RequestFailed` past the retry bound. `ident` names the sample (task and repeat),
        so that batched repeats of one prompt are answered apart."""
        return await self.client.complete(self.request_body(prompt), _reply, ident=ident)


# What the reference's ChatCompletionSampler answers for a request refused with BadRequestError.
REFUSED_REPLY = "No response (bad request)."
# Statuses a refusal of the prompt comes with: 400 (OpenAI, Azure, vLLM) and 422 (TGI's input validation).
_REFUSAL_STATUSES = (400, 422)
_PROMPT_CODES = frozenset(
    {
        "invalid_prompt",
        "content_filter",
        "content_policy_violation",
        "context_length_exceeded",
        "string_above_max_length",
    }
)
_PROMPT_PHRASES = ("content filter", "content management policy", "maximum context length", "prompt is too long")
# An error naming one of these is about the conversation; naming any other parameter, about the request.
_PROMPT_PARAMS = (None, "messages", "input", "prompt")
# Refusals stop the run once at least this many policy answers are in (or all there are, if fewer) and more
# than half of them are refusals: a filter flags a few health prompts, never most of them.
REFUSAL_PROBE = 20


@dataclass(frozen=True)
class Refusal:
    """The provider's refusal of a prompt, as results.jsonl records it."""

    status: int
    code: str | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        """The refusal as the `policy_error` field of a result."""
        return {"status": self.status, "code": self.code, "message": self.message}

    def describe(self) -> str:
        """One line: status, code and the provider's message."""
        return f"HTTP {self.status}{f' {self.code}' if self.code else ''}: {self.message}"


def _error_object(body: bytes) -> Mapping[str, Any]:
    """The error object of an error body (OpenAI's `{"error": {...}}`, vLLM's flat one), or {}."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return {"message": body.decode("utf-8", "replace")}
    if not isinstance(parsed, dict):
        return {}
    error = parsed.get("error", parsed)
    if isinstance(error, str):
        return {"message": error}
    return error if isinstance(error, dict) else {}


def prompt_refusal(failure: RequestFailed) -> Refusal | None:
    """The refusal when `failure` is the provider refusing the prompt itself, else None."""
    if failure.status not in _REFUSAL_STATUSES:
        return None
    error = _error_object(failure.body)
    raw_code, param = error.get("code"), error.get("param")
    code = raw_code if isinstance(raw_code, str) else None
    message = str(error.get("message") or error.get("detail") or failure.cause)
    if param not in _PROMPT_PARAMS:
        return None
    if code in _PROMPT_CODES or any(phrase in message.lower() for phrase in _PROMPT_PHRASES):
        return Refusal(failure.status, code, message)
    return None


class RefusalGuard:
    """Counts a run's policy answers and prompt refusals, and stops the run when refusals are not the
    exception; `answered` starts at the samples an earlier session already has replies for."""

    def __init__(self, expected: int, answered: int = 0) -> None:
        self.expected = expected
        self.answered = answered
        self.refused = 0
        self.last: Refusal | None = None

    def answer(self) -> None:
        """Count a reply; `PolicyMisuse` when refusals are still most of the answers once enough are in."""
        self.answered += 1
        self._check()

    def refuse(self, refusal: Refusal) -> None:
        """Count a refused prompt; `PolicyMisuse` when refusals are now most of the answers."""
        self.refused += 1
        self.last = refusal
        self._check()

    def _check(self) -> None:
        seen = self.answered + self.refused
        if seen >= min(REFUSAL_PROBE, self.expected) and 2 * self.refused > seen and self.last is not None:
            shown = f" The last refusal: {self.last.describe()}"
            raise PolicyMisuse(
                f"the model refused {self.refused} of the {seen} prompts answered so far; refusals this "
                "common are not a few prompts a filter flags but a problem with the requests (model, endpoint, "
                f"parameters, key), so no score is written.{shown}"
            )


def misuse(failure: RequestFailed, base_url: str) -> PolicyMisuse | None:
    """`PolicyMisuse` for a request refused with a 4xx that is no refusal of the prompt, else None."""
    if failure.status is None or not 400 <= failure.status < 500 or prompt_refusal(failure) is not None:
        return None
    message = _error_object(failure.body).get("message")
    said = f"HTTP {failure.status}: {message}" if isinstance(message, str) and message else failure.cause
    return PolicyMisuse(f"{base_url} refused a request to the model ({said}); no score is written.")
