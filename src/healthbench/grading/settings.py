"""Grader settings, and the one place where a grader and its client are built.

The grader's endpoint and key are its own: `HEALTHBENCH_GRADER_BASE_URL` and `HEALTHBENCH_GRADER_API_KEY`
(else `OPENAI_API_KEY`). `OPENAI_BASE_URL` is never read here, because trainers and harnesses point it at
the policy being evaluated, and a grader silently following it would grade with the wrong model.

A grader that is not a reasoning model is asked as the reference asks gpt-4.1 (temperature 0.5, max_tokens
2048). A reasoning model (o-series, gpt-5 and later, or `reasoning=True`) gets no temperature and no
`max_tokens`: its reasoning effort, and an output cap only when one is set.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from healthbench.api.client import OPENAI_BASE_URL, ApiClient, Budget, Completer, client_for
from healthbench.api.wire import APIS, ApiName, Effort, Shape, is_reasoning_model
from healthbench.data.subsets import PROFESSIONAL
from healthbench.grading.grader import DEFAULT_GRADER_MODEL, GRADER_MAX_TOKENS, GRADER_TEMPERATURE, Grader, VerdictCache
from healthbench.grading.prompt import TEMPLATE_SHA256
from healthbench.grading.scoring import PROFESSIONAL_LENGTH_ADJUSTMENT, LengthAdjustment

DEFAULT_CONCURRENCY = 64

# HealthBench Professional's official grading (SPEC section 7): gpt-5.4 at low effort, through the Responses API.
PROFESSIONAL_GRADER: dict[str, Any] = {"model": "gpt-5.4-2026-03-05", "reasoning_effort": "low", "api": "responses"}


class GraderConfig(BaseModel):
    """Everything that decides how replies are graded. The key is a secret and is never serialised.

    `system_message`: whether the reference's grader system message is sent; by default it is through Chat
    Completions (as the reference sends it) and not through the Responses API (the reference's Responses
    sampler sends none unless given one; whether HealthBench Professional's grader is given one is not
    confirmed, hence the setting).
    """

    model_config = ConfigDict(frozen=True)

    model: str = DEFAULT_GRADER_MODEL
    base_url: str = OPENAI_BASE_URL
    api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1)
    max_attempts: int = Field(default=12, ge=1)
    timeout: float = Field(default=120.0, gt=0)
    # The account's rate limits for the grader, when the user knows them (else learned from the server).
    rpm: float | None = Field(default=None, gt=0)
    tpm: float | None = Field(default=None, gt=0)
    api: ApiName = "chat"
    reasoning: bool | None = None
    reasoning_effort: Effort | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    system_message: bool | None = None

    @classmethod
    def from_env(
        cls,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        defaults: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> GraderConfig:
        """Settings from explicit values, falling back to the grader's own environment variables, then to
        `defaults` (a subset's official settings), then to the reference's."""
        env = os.environ
        given = {name: value for name, value in overrides.items() if value is not None}
        settings: dict[str, Any] = {**(defaults or {}), **given}
        if chosen := model or env.get("HEALTHBENCH_GRADER_MODEL"):
            settings["model"] = chosen
        # A default effort belongs to the default model: a grader chosen instead that is no reasoning model
        # gets none, rather than an error for a setting the user never gave.
        forced = settings.get("reasoning")
        reasons = is_reasoning_model(settings.get("model", DEFAULT_GRADER_MODEL)) if forced is None else forced
        if "reasoning_effort" not in given and not reasons:
            settings.pop("reasoning_effort", None)
        key = api_key or env.get("HEALTHBENCH_GRADER_API_KEY") or env.get("OPENAI_API_KEY")
        return cls(
            **settings,
            base_url=base_url or env.get("HEALTHBENCH_GRADER_BASE_URL") or OPENAI_BASE_URL,
            api_key=SecretStr(key) if key else None,
        )

    @classmethod
    def for_subset(cls, subset: str | None, **values: Any) -> GraderConfig:
        """`from_env` with the subset's official settings as the defaults (Professional's; the others have none)."""
        return cls.from_env(defaults=PROFESSIONAL_GRADER if subset == PROFESSIONAL else None, **values)

    @model_validator(mode="after")
    def _settings_fit_the_model(self) -> GraderConfig:
        if self.reasoning_effort is not None and not self.is_reasoning:
            raise ValueError(
                f"grader {self.model} is not treated as a reasoning model, so it takes no reasoning effort; "
                "drop --grader-reasoning-effort, or pass --grader-reasoning"
            )
        return self

    @property
    def is_reasoning(self) -> bool:
        """Whether the grader takes a reasoning effort and no temperature: by name unless `reasoning` says."""
        return self.reasoning if self.reasoning is not None else is_reasoning_model(self.model)

    @property
    def shape(self) -> Shape:
        """How the grader model is asked."""
        if self.is_reasoning:
            return Shape(self.api, True, None, self.max_output_tokens, self.reasoning_effort)
        return Shape(self.api, False, GRADER_TEMPERATURE, self.max_output_tokens or GRADER_MAX_TOKENS)

    @property
    def sends_system_message(self) -> bool:
        """Whether the grader's system message goes first."""
        return self.system_message if self.system_message is not None else self.api == "chat"

    def request_settings(self) -> dict[str, Any]:
        """How the grader is asked, for run.json and the report."""
        return self.shape.describe() | {"system_message": self.sends_system_message}

    def identity(self) -> dict[str, Any]:
        """What decides the verdicts: recorded with a run, and compared on resume. The request settings are
        named only when they are not the reference's, so runs made before they existed still resume."""
        identity: dict[str, Any] = {"grader_model": self.model, "template_sha256": TEMPLATE_SHA256}
        settings = self.request_settings()
        if settings != _REFERENCE_SETTINGS:
            identity["grader_request"] = settings
        return identity

    def describe(self) -> dict[str, Any]:
        """What a run reports about its grader (never the key)."""
        return self.identity() | {"grader_base_url": self.base_url, "grader_request": self.request_settings()}

    def official_differences(self, official: dict[str, Any]) -> list[str]:
        """How these settings differ from an official configuration (`PROFESSIONAL_GRADER`), one line each."""
        mine = {"model": self.model, "reasoning_effort": self.reasoning_effort, "api": self.api}
        return [
            f"grader {name.replace('_', ' ')} {mine[name] or 'none'} (official: {value})"
            for name, value in official.items()
            if mine[name] != value
        ]

    def build(
        self,
        cache: VerdictCache | None = None,
        budget: Budget | None = None,
        wrap: Callable[[ApiClient], Completer] | None = None,
    ) -> Grader:
        """A grader with a client of its own, under `budget` if given, else a budget of `concurrency`; `wrap`
        turns the live client into another way of sending (the Batch API)."""
        chat = self.chat(budget)
        client = chat if wrap is None else wrap(chat)
        return Grader(client, self.model, shape=self.shape, system_message=self.sends_system_message, cache=cache)

    def chat(self, budget: Budget | None = None) -> ApiClient:
        """The live client for the grader's endpoint and API: its key, concurrency, timeout and retry table."""
        return client_for(self, budget, APIS[self.api])


_REFERENCE_SETTINGS = GraderConfig().request_settings()


def length_adjustment_for(
    subset: str | None, center: float | None, penalty_per_500_chars: float | None
) -> LengthAdjustment | None:
    """The settings given (both or neither); with neither, the subset's official adjustment (Professional's),
    and none for the other subsets, which have no confirmed one."""
    if (center is None) != (penalty_per_500_chars is None):
        raise ValueError(
            "length adjustment: give both length_adjustment_center and length_adjustment_penalty_per_500_chars "
            "(--length-adjustment-center and --length-adjustment-penalty-per-500-chars), or neither"
        )
    if center is not None and penalty_per_500_chars is not None:
        return LengthAdjustment(center, penalty_per_500_chars)
    return PROFESSIONAL_LENGTH_ADJUSTMENT if subset == PROFESSIONAL else None


@dataclass
class _Lease:
    grader: Grader
    users: int = 0


class GraderPool:
    """One grader per distinct settings and key, shared by its callers while any of them is grading.

    Callers of one key share connections and the client's rate pacing; the last one to finish closes the
    client, so a key seen once leaves nothing behind. With `concurrency`, every grader draws on one budget of
    that size; without, each on its own settings' budget.
    """

    def __init__(self, concurrency: int | None = None) -> None:
        self._budget = Budget(concurrency) if concurrency is not None else None
        # Keyed by a digest, so the raw key is held only where it is used: the client's headers.
        self._leases: dict[str, _Lease] = {}

    @asynccontextmanager
    async def lease(self, config: GraderConfig) -> AsyncIterator[Grader]:
        """The grader of `config` (its key included), for the duration of the block."""
        secret = config.api_key.get_secret_value() if config.api_key is not None else ""
        slot = hashlib.sha256(f"{config.model_dump_json()}\n{secret}".encode()).hexdigest()
        lease = self._leases.get(slot)
        if lease is None:
            lease = self._leases[slot] = _Lease(config.build(budget=self._budget))
        lease.users += 1
        try:
            yield lease.grader
        finally:
            lease.users -= 1
            if lease.users == 0:
                del self._leases[slot]
                await lease.grader.client.aclose()
