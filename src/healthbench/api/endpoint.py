"""The settings of one model at one OpenAI-compatible endpoint, and the one place a live client is made from
them: the grader's settings and the policy's both build on `EndpointSettings`, so a key, a timeout, a retry
bound, a rate limit and the reasoning-model rule mean the same on both sides."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from healthbench.api.client import OPENAI_BASE_URL, ApiClient, Budget, RetryPolicy, key_slot
from healthbench.api.wire import CHAT, Api, Effort, is_reasoning_model


class EndpointSettings(BaseModel):
    """How a model is reached: endpoint, key (a secret, never serialised), concurrency, timeout, attempts and
    the account's rate limits when the user knows them (else learned from the server's answers).

    `reasoning` says whether the model is a reasoning model (no temperature, no `max_tokens`, a reasoning
    effort); None decides by name (o-series, gpt-5 and later).
    """

    model_config = ConfigDict(frozen=True)

    model: str
    base_url: str = OPENAI_BASE_URL
    api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    concurrency: int = Field(default=32, ge=1)
    max_attempts: int = Field(default=12, ge=1)
    timeout: float = Field(default=120.0, gt=0)
    rpm: float | None = Field(default=None, gt=0)
    tpm: float | None = Field(default=None, gt=0)
    reasoning: bool | None = None
    reasoning_effort: Effort | None = None

    @property
    def is_reasoning(self) -> bool:
        """Whether the model takes a reasoning effort and no temperature: by name unless `reasoning` says."""
        return self.reasoning if self.reasoning is not None else is_reasoning_model(self.model)

    @property
    def key_slot(self) -> str:
        """This key at this endpoint, as a digest (what one pace and one rate limit belong to)."""
        return key_slot(self.base_url, self.api_key.get_secret_value() if self.api_key else None)

    def client(self, budget: Budget | None = None, api: Api = CHAT) -> ApiClient:
        """The live client of `api` for these settings, under `budget` if given, else one of `concurrency`."""
        return ApiClient(
            self.base_url,
            self.api_key.get_secret_value() if self.api_key else None,
            concurrency=self.concurrency,
            timeout=self.timeout,
            retry=RetryPolicy(max_attempts=self.max_attempts),
            budget=budget,
            api=api,
            rpm=self.rpm,
            tpm=self.tpm,
        )
