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

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, SecretStr, model_validator

from healthbench.api.client import OPENAI_BASE_URL, ApiClient, Completer
from healthbench.api.endpoint import REASONING_TIMEOUT, EndpointSettings, OutputTokens, pace_store_from_env
from healthbench.api.failures import provider_error
from healthbench.api.wire import Shape, Usage
from healthbench.data.schema import Message
from healthbench.errors import PolicyMisuse, RequestFailed, SettingsError

# OpenAI's range of sampling temperatures; nan would go out as `NaN`, which is not JSON.
Temperature = Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)]


class PolicyConfig(EndpointSettings):
    """How the evaluated model is called: always through Chat Completions, the API every compatible server has.

    `policy_errors`: `grade` grades a prompt the provider refuses with `REFUSED_REPLY`; `fail` makes it a sample
    that cannot be graded."""

    # A reply may be long (no cap unless given), from a slow local server: the reasoning model's bound for any.
    chat_timeout: ClassVar[float] = REASONING_TIMEOUT
    system_message: str | None = None
    temperature: Temperature | None = None
    max_tokens: OutputTokens | None = None
    policy_errors: Literal["grade", "fail"] = "grade"

    @classmethod
    def from_env(cls, *, base_url: str | None = None, **values: Any) -> PolicyConfig:
        """Settings for the policy: URL from the flag or `OPENAI_BASE_URL`, key from `OPENAI_API_KEY`, pace store
        from `HEALTHBENCH_PACE_STORE` unless given."""
        key = os.environ.get("OPENAI_API_KEY")
        given = {name: value for name, value in values.items() if value is not None}
        return cls(
            base_url=base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL,
            api_key=SecretStr(key) if key else None,
            **{"pace_store": pace_store_from_env(), **given},
        )

    @model_validator(mode="after")
    def _settings_fit_the_model(self) -> PolicyConfig:
        # Each setting is sent or refused here, never dropped on the way: what run.json records went out.
        if self.is_reasoning and self.temperature is not None:
            raise SettingsError(
                f"{self.model} is treated as a reasoning model, which takes no temperature: drop `temperature`, "
                "or set `reasoning=False` to send it anyway"
            )
        if not self.is_reasoning and self.reasoning_effort is not None:
            raise SettingsError(
                f"{self.model} is not treated as a reasoning model, so it takes no reasoning effort: drop "
                "`reasoning_effort`, or set `reasoning=True` if it is one"
            )
        return self

    @property
    def shape(self) -> Shape:
        """How the model is asked."""
        if self.is_reasoning:
            return Shape("chat", True, None, self.max_tokens, self.reasoning_effort)
        return Shape("chat", False, self.temperature, self.max_tokens)


class Policy:
    """Samples replies from the evaluated model, live, or through `wrap` (the Batch API, say)."""

    def __init__(self, config: PolicyConfig, wrap: Callable[[ApiClient], Completer] | None = None) -> None:
        self.config = config
        live = config.client()
        self.client: Completer = live if wrap is None else wrap(live)

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
        return await self.client.complete(self.request_body(prompt), str, ident=ident)


# What the reference's ChatCompletionSampler answers for a request refused with BadRequestError.
REFUSED_REPLY = "No response (bad request)."
# Statuses a refusal of the prompt comes with: 400 (OpenAI, Azure, vLLM) and 422 (TGI's input validation).
# Refusals stop the run once at least this many policy answers are in (or all there are, if fewer) and more
# than half of them are refusals: a filter flags a few health prompts, never most of them.
REFUSAL_PROBE = 20


@dataclass(frozen=True)
class PromptRefusal:
    """The provider's refusal of a prompt, as results.jsonl records it."""

    status: int
    code: str | None
    message: str

    def describe(self) -> str:
        """One line: status, code and the provider's message."""
        return f"HTTP {self.status}{f' {self.code}' if self.code else ''}: {self.message}"


def prompt_refusal(failure: RequestFailed) -> PromptRefusal | None:
    """The refusal when `failure` is the provider refusing the prompt itself, else None."""
    error = provider_error(failure)
    if error is None or error.status is None or not error.about_prompt:
        return None
    return PromptRefusal(error.status, error.code, error.message or failure.cause)


class RefusalGuard:
    """Counts a run's policy answers and prompt refusals, and stops the run when refusals are not the
    exception; `answered` starts at the samples an earlier session already has replies for."""

    def __init__(self, expected: int, answered: int = 0) -> None:
        self.expected = expected
        self.answered = answered
        self.refused = 0
        self.last: PromptRefusal | None = None

    @property
    def decided(self) -> bool:
        """Whether enough answers are in for the refusals to be judged (and they did not stop the run)."""
        return self.answered + self.refused >= min(REFUSAL_PROBE, self.expected)

    def answer(self) -> None:
        """Count a reply; `PolicyMisuse` when refusals are still most of the answers once enough are in."""
        self.answered += 1
        self._check()

    def refuse(self, refusal: PromptRefusal) -> None:
        """Count a refused prompt; `PolicyMisuse` when refusals are now most of the answers."""
        self.refused += 1
        self.last = refusal
        self._check()

    def _check(self) -> None:
        seen = self.answered + self.refused
        if self.decided and 2 * self.refused > seen and self.last is not None:
            raise PolicyMisuse.refusals(self.refused, seen, self.last.describe())


def misuse(failure: RequestFailed, base_url: str) -> PolicyMisuse | None:
    """`PolicyMisuse` for a request refused with a 4xx that is no refusal of the prompt, else None."""
    if failure.status is None or not 400 <= failure.status < 500 or prompt_refusal(failure) is not None:
        return None
    error = provider_error(failure)
    said = f"HTTP {failure.status}: {error.message}" if error is not None and error.message else failure.cause
    return PolicyMisuse.refused_request(base_url, said)
