"""The settings of one model at one OpenAI-compatible endpoint, and the one place a live client is made from
them: the grader's settings and the policy's both build on `EndpointSettings`, so a key, a timeout, a retry
bound, a rate limit and the reasoning-model rule mean the same on both sides."""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator

from healthbench.api.client import OPENAI_BASE_URL, TIMEOUT, ApiClient, Budget, Retries
from healthbench.api.keygates import key_slot
from healthbench.api.pacing.store import PACE_STORE_VARIABLE, shared_store, validated
from healthbench.api.wire import CHAT, Api, Effort, is_reasoning_model
from healthbench.errors import SettingsError

# In flight at most when the budget follows the limit: tier 5's 10,000 RPM at a few seconds a request, with room.
MAX_IN_FLIGHT = 1024
REASONING_TIMEOUT = 600.0
"""Seconds an attempt of a reasoning model may take by default, as openai-python allows any request: at high
effort it may think for tens of thousands of tokens before it answers, which takes minutes."""
LONGEST_TIMEOUT = 86_400.0
"""The longest timeout an attempt may be given (a day): a bound that is one."""

# The numbers an endpoint's settings take, as the settings models and the command's flags both take them (the
# flags' types are made from these, `cli.bounds.bounded`). A limit under one request or one grader request's
# tokens (a few thousand) a minute admits nothing in useful time, and one past any account's (OpenAI's largest
# are some 30,000 RPM and 150M TPM) is a typo; inf and nan are no numbers of either.
Concurrency = Annotated[int, Field(ge=1, le=MAX_IN_FLIGHT)]
Attempts = Annotated[int, Field(ge=1, le=100)]
RequestsPerMinute = Annotated[float, Field(ge=1, le=1_000_000, allow_inf_nan=False)]
TokensPerMinute = Annotated[float, Field(ge=1_000, le=10_000_000_000, allow_inf_nan=False)]
# An output cap: the longest any model writes is well under a million tokens.
OutputTokens = Annotated[int, Field(ge=1, le=1_000_000)]
# Seconds an attempt may take.
Timeout = Annotated[float, Field(gt=0, le=LONGEST_TIMEOUT, allow_inf_nan=False)]


def pace_store_from_env() -> str | None:
    """The pace store named by `HEALTHBENCH_PACE_STORE`, if any."""
    return os.environ.get(PACE_STORE_VARIABLE, "").strip() or None


_OPENAI_HOST = urlsplit(OPENAI_BASE_URL).hostname


def is_openai(base_url: str) -> bool:
    """Whether an endpoint is OpenAI's own API (whose keys and limits are known), not a compatible server."""
    return urlsplit(base_url).hostname == _OPENAI_HOST


class EndpointSettings(BaseModel):
    """How a model is reached: endpoint, key (a secret, never serialised), concurrency, timeout, attempts and
    the account's rate limits when the user knows them (else learned from the server's answers).

    The in-flight budget starts at `concurrency` and, once the limits are known, follows what they and the
    latency need, up to `max_concurrency`; a `concurrency` given without a `max_concurrency` is a ceiling the
    budget stays at. `pace_store` (a Redis URL) shares each key's pace with every process naming it.

    `reasoning` says whether the model is a reasoning model (no temperature, no `max_tokens`, a reasoning
    effort); None decides by name (o-series, gpt-5 and later). `timeout` bounds each attempt, in seconds; None
    gives `REASONING_TIMEOUT` to a reasoning model and `chat_timeout` to another (see `attempt_timeout`).
    """

    model_config = ConfigDict(frozen=True)

    model: str
    base_url: str = OPENAI_BASE_URL
    api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    concurrency: Concurrency = 32
    max_concurrency: Concurrency | None = MAX_IN_FLIGHT
    pace_store: str | None = None
    max_attempts: Attempts = 12
    timeout: Timeout | None = None
    rpm: RequestsPerMinute | None = None
    tpm: TokensPerMinute | None = None
    reasoning: bool | None = None
    reasoning_effort: Effort | None = None
    # The default timeout of a model that is not a reasoning model: a short answer, such as a grader's verdict.
    chat_timeout: ClassVar[float] = TIMEOUT

    @model_validator(mode="before")
    @classmethod
    def _a_given_concurrency_is_a_ceiling(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("concurrency") is not None and "max_concurrency" not in data:
            return {**data, "max_concurrency": None}
        return data

    @field_validator("pace_store")
    @classmethod
    def _a_redis_url(cls, url: str | None) -> str | None:
        return None if url is None else validated(url)

    @field_validator("model", "base_url")
    @classmethod
    def _not_empty(cls, value: str, info: ValidationInfo) -> str:
        # An empty name is sent as one, and the server's 404 then says less than this does.
        if not value.strip():
            raise SettingsError(f"`{info.field_name}` is empty: name one")
        return value

    @property
    def is_reasoning(self) -> bool:
        """Whether the model takes a reasoning effort and no temperature: by name unless `reasoning` says."""
        return self.reasoning if self.reasoning is not None else is_reasoning_model(self.model)

    @property
    def attempt_timeout(self) -> float:
        """Seconds one attempt may take: `timeout` if given, else by the model's kind."""
        if self.timeout is not None:
            return self.timeout
        return REASONING_TIMEOUT if self.is_reasoning else self.chat_timeout

    @property
    def key_slot(self) -> str:
        """This key at this endpoint, as a digest (what one pace and one rate limit belong to)."""
        return key_slot(self.base_url, self.api_key.get_secret_value() if self.api_key else None)

    def client(self, budget: Budget | None = None, api: Api = CHAT, *, slow_start: bool = True) -> ApiClient:
        """The live client of `api` for these settings, under `budget` if given, else one of `concurrency`;
        `slow_start` as `ApiClient` takes it."""
        store = shared_store(self.pace_store) if self.pace_store is not None else None
        return ApiClient(
            self.base_url,
            self.api_key.get_secret_value() if self.api_key else None,
            concurrency=self.concurrency,
            max_concurrency=self.max_concurrency,
            timeout=self.attempt_timeout,
            retry=Retries(max_attempts=self.max_attempts),
            budget=budget,
            api=api,
            rpm=self.rpm,
            tpm=self.tpm,
            pace_store=store,
            slow_start=slow_start,
        )

    def check_pace_store(self) -> None:
        """Reach the pace store, if there is one, before anything is sent: `PaceStoreUnreachable` if it cannot."""
        if self.pace_store is not None:
            shared_store(self.pace_store).check()
