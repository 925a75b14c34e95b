"""The model under evaluation: any OpenAI-compatible chat-completions endpoint.

Requests mirror the reference sampler: an optional system message first, then the task's conversation,
with `temperature` and `max_tokens` when given. Reasoning models take no temperature and count
`max_completion_tokens`; they are recognised by name (o1, o3, o4, gpt-5 families) or by `--reasoning`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from .client import OPENAI_BASE_URL, ChatClient, Completer, client_for
from .data import Message
from .wire import Effort, Shape, Usage, is_reasoning_model


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

    def chat(self) -> ChatClient:
        """The live client for the model's endpoint: its key, concurrency, timeout and retry table."""
        return client_for(self)

    def identity(self) -> dict[str, Any]:
        """What decides the replies: recorded with a run, and compared on resume."""
        return self.model_dump(include={"model", "system_message", "temperature", "max_tokens", "reasoning_effort"}) | {
            "reasoning": self.is_reasoning
        }


class Policy:
    """Samples replies from the evaluated model, live, or through `wrap` (the Batch API, say)."""

    def __init__(self, config: PolicyConfig, wrap: Callable[[ChatClient], Completer] | None = None) -> None:
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
