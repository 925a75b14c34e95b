"""The settings of one model at one OpenAI-compatible endpoint, and the one place a live client is made from
them: the grader's settings and the policy's both build on `EndpointSettings`, so a key, a timeout, a retry
bound, a rate limit and the reasoning-model rule mean the same on both sides."""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator

from healthbench.api.client import OPENAI_BASE_URL, TIMEOUT, ApiClient, Budget, Budgets, Retries
from healthbench.api.keygates import key_slot
from healthbench.api.pacing.store import PACE_STORE_VARIABLE, shared_store, validated
from healthbench.api.wire import CHAT, Api, Effort, is_reasoning_model
from healthbench.errors import SettingsError

# In flight at most when the budget follows the limit: tier 5's 10,000 RPM at a few seconds a request, with room.
# It bounds a budget at OpenAI's API too, whose limits are what a budget there serves.
MAX_IN_FLIGHT = 1024
MOST_IN_FLIGHT = 4096
"""In flight at most at one server of your own (a vLLM or SGLang judge: no rate limit to learn), whose capacity is
what the budget serves: vLLM's `max_num_seqs` is 256 to 1,024 as people set it, and a request past it only queues
there. A pool of servers holds this at each."""
REASONING_TIMEOUT = 600.0
"""Seconds an attempt of a reasoning model may take by default, as openai-python allows any request: at high
effort it may think for tens of thousands of tokens before it answers, which takes minutes."""
LONGEST_TIMEOUT = 86_400.0
"""The longest timeout an attempt may be given (a day): a bound that is one."""

# The numbers an endpoint's settings take, as the settings models and the command's flags both take them (the
# flags' types are made from these, `cli.bounds.bounded`). A limit under one request or one grader request's
# tokens (a few thousand) a minute admits nothing in useful time, and one past any account's (OpenAI's largest
# are some 30,000 RPM and 150M TPM) is a typo; inf and nan are no numbers of either.
Concurrency = Annotated[int, Field(ge=1, le=MOST_IN_FLIGHT)]
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
    """Whether an endpoint (or one of a pool's, comma-separated) is OpenAI's own API (whose keys and limits are
    known), not a compatible server."""
    return any(urlsplit(url.strip()).hostname == _OPENAI_HOST for url in base_url.split(","))


def is_http_url(url: str) -> bool:
    """Whether `url` is one a client can send to: http:// or https:// (in any case), then a host."""
    parts = urlsplit(url)
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def base_urls(base_url: str) -> tuple[str, ...]:
    """The servers a `base_url` setting names: one, or several serving one model, comma-separated (a pool)."""
    return tuple(url.strip().rstrip("/") for url in base_url.split(","))


class EndpointSettings(BaseModel):
    """How a model is reached: endpoint, key (a secret, never serialised), concurrency, timeout, attempts and
    the account's rate limits when the user knows them (else learned from the server's answers).

    `base_url` is one endpoint, or several servers of the model comma-separated: a pool (self-hosted judge
    replicas), each request sent to one of them (`api.routing`), each server with a budget and a pace of its own.
    The in-flight budget (at each server) starts at `concurrency` and, once the limits are known, follows what they
    and the latency need, up to `max_concurrency`; a `concurrency` given without a `max_concurrency` is a ceiling the
    budget stays at. At OpenAI's API neither may pass `MAX_IN_FLIGHT`; at servers of your own, `MOST_IN_FLIGHT`.
    `pace_store` (a Redis URL) shares each key's pace with every process naming it.

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

    @field_validator("base_url")
    @classmethod
    def _a_pool_of_distinct_servers(cls, value: str) -> str:
        urls = base_urls(value)
        if len(urls) == 1:
            return value
        if "" in urls:
            raise SettingsError(f"`base_url` {value!r} has an empty server between its commas")
        if len(set(urls)) < len(urls):
            raise SettingsError(f"`base_url` {value!r} names a server twice: a pool's servers are each named once")
        return ",".join(urls)

    @model_validator(mode="after")
    def _openai_budgets_are_bounded(self) -> EndpointSettings:
        largest = max(self.concurrency, self.max_concurrency or 0)
        if largest > MAX_IN_FLIGHT and is_openai(self.base_url):
            raise SettingsError(
                f"a concurrency of {largest:,} at OpenAI's API: at most {MAX_IN_FLIGHT:,} there (its rate limits, "
                f"not the budget, bound what it takes); up to {MOST_IN_FLIGHT:,} a server at servers of your own"
            )
        return self

    @property
    def base_urls(self) -> tuple[str, ...]:
        """The servers requests go to: one, or a pool's."""
        return base_urls(self.base_url)

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

    def client(self, budget: Budget | Budgets | None = None, api: Api = CHAT, *, slow_start: bool = True) -> ApiClient:
        """The live client of `api` for these settings, under `budget` if given (`Budgets`: one for each server),
        else one of `concurrency` at each server; `slow_start` as `ApiClient` takes it, for one server: a pool's
        servers are your own, with no rate limit for a slow start to find (their 429s, if any, teach the pace)."""
        store = shared_store(self.pace_store) if self.pace_store is not None else None
        urls = self.base_urls
        return ApiClient(
            urls,
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
            slow_start=slow_start and len(urls) == 1,
        )

    def check_pace_store(self) -> None:
        """Reach the pace store, if there is one, before anything is sent: `PaceStoreUnreachable` if it cannot."""
        if self.pace_store is not None:
            shared_store(self.pace_store).check()
