"""Grader settings, and the one place where a grader and its client are built.

The grader's endpoint and key are its own: `HEALTHBENCH_GRADER_BASE_URL` and `HEALTHBENCH_GRADER_API_KEY`
(else `OPENAI_API_KEY`). `OPENAI_BASE_URL` is never read here, because trainers and harnesses point it at
the policy being evaluated, and a grader silently following it would grade with the wrong model. A served
environment also takes the OpenReward SDK's judge channel (`openreward.chat_backends`); the one order of
precedence for it is below (`SESSION_KEY_SECRETS`, `SERVED_KEY_VARIABLES`, `SERVED_BASE_URL_VARIABLES`).

A grader that is not a reasoning model is asked as the reference asks gpt-4.1 (temperature 0.5, max_tokens
2048). A reasoning model (o-series, gpt-5 and later, or `reasoning=True`) gets no temperature and no
`max_tokens`: its reasoning effort, and an output cap only when one is set.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator

from healthbench.api.client import OPENAI_BASE_URL, ApiClient, Budget, Budgets, Completer
from healthbench.api.endpoint import (
    Attempts,
    Concurrency,
    EndpointSettings,
    OutputTokens,
    RequestsPerMinute,
    Timeout,
    TokensPerMinute,
    pace_store_from_env,
)
from healthbench.api.wire import APIS, Api, ApiName, Effort, Shape, is_reasoning_model
from healthbench.data.subsets import PROFESSIONAL
from healthbench.errors import SettingsError
from healthbench.grading.grader import (
    DEFAULT_GRADER_MODEL,
    GRADER_MAX_TOKENS,
    GRADER_TEMPERATURE,
    PER_ITEM,
    Grader,
    GraderCalls,
)
from healthbench.grading.official import PROFESSIONAL_GRADER, Difference, differences, length_adjustment_for
from healthbench.grading.per_reply import PER_REPLY_TEMPLATE_SHA256
from healthbench.grading.prompt import TEMPLATE_SHA256
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.verdict import VerdictCache

DEFAULT_CONCURRENCY = 64
# A length adjustment's numbers: a center past a million characters, or a penalty of more than a whole score per
# 500 characters (Professional's is 0.0147), is a typo.
LengthCenter = Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)]
LengthPenalty = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]

# Where the grader's key and endpoint come from, first found wins. The grading commands read the project's own
# variables; `serve` reads a session's secrets first (the caller pays for its grading), then the server's
# variables, the SDK's judge channel (`CHAT_*`) after the project's. `OPENAI_BASE_URL` is in no list.
KEY_VARIABLES = ("HEALTHBENCH_GRADER_API_KEY", "OPENAI_API_KEY")
BASE_URL_VARIABLES = ("HEALTHBENCH_GRADER_BASE_URL",)
SESSION_KEY_SECRETS = ("chat_api_key", "OPENAI_API_KEY")
SERVED_KEY_VARIABLES = ("HEALTHBENCH_GRADER_API_KEY", "CHAT_API_KEY", "OPENAI_API_KEY")
SERVED_BASE_URL_VARIABLES = ("HEALTHBENCH_GRADER_BASE_URL", "CHAT_BASE_URL")


def _first(values: Mapping[str, Any], names: tuple[str, ...]) -> str | None:
    """The first non-blank value of `names` in `values`, stripped."""
    for name in names:
        value = values.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def session_grader_key(secrets: Mapping[str, Any]) -> str | None:
    """The grader key an OpenReward session brings: its `chat_api_key` secret (the SDK's judge channel), else
    its `OPENAI_API_KEY`, names matched case-insensitively as the SDK matches them; None when it brings
    neither and the server's own key applies."""
    return _first({name.lower(): value for name, value in secrets.items()}, tuple(map(str.lower, SESSION_KEY_SECRETS)))


class GraderConfig(EndpointSettings):
    """Everything that decides how replies are graded. The key is a secret and is never serialised.

    `system_message`: whether the reference's grader system message is sent; by default it is through Chat
    Completions (as the reference sends it) and not through the Responses API (the reference's Responses
    sampler sends none unless given one; whether HealthBench Professional's grader is given one is not
    confirmed, hence the setting).

    `calls`: one grader call per rubric item (`per-item`, the reference's) or per reply (`per-reply`, opt-in: not
    the official grading). `prompt_cache_key`: whether each request carries a `prompt_cache_key` (off for an
    endpoint that refuses fields it does not know); it changes no prompt and no verdict.
    """

    model: str = DEFAULT_GRADER_MODEL
    concurrency: Concurrency = DEFAULT_CONCURRENCY
    api: ApiName = "chat"
    max_output_tokens: OutputTokens | None = None
    system_message: bool | None = None
    calls: GraderCalls = PER_ITEM
    prompt_cache_key: bool = True

    @classmethod
    def from_env(
        cls,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        defaults: dict[str, Any] | None = None,
        served: bool = False,
        **overrides: Any,
    ) -> GraderConfig:
        """Settings from explicit values, falling back to the grader's own environment variables (with
        `served`, a served environment's, the SDK's `CHAT_*` included; the pace store from
        `HEALTHBENCH_PACE_STORE`), then to `defaults` (a subset's official settings), then to the reference's."""
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
        key = api_key or _first(env, SERVED_KEY_VARIABLES if served else KEY_VARIABLES)
        settings.setdefault("pace_store", pace_store_from_env())
        return cls(
            **settings,
            base_url=base_url
            or _first(env, SERVED_BASE_URL_VARIABLES if served else BASE_URL_VARIABLES)
            or OPENAI_BASE_URL,
            api_key=SecretStr(key) if key else None,
        )

    @classmethod
    def for_subset(cls, subset: str | None, **values: Any) -> GraderConfig:
        """`from_env` with the subset's official settings as the defaults (Professional's; the others have none)."""
        return cls.from_env(defaults=PROFESSIONAL_GRADER if subset == PROFESSIONAL else None, **values)

    @model_validator(mode="after")
    def _settings_fit_the_model(self) -> GraderConfig:
        if self.reasoning_effort is not None and not self.is_reasoning:
            raise SettingsError(
                f"grader {self.model} is not treated as a reasoning model, so it takes no reasoning effort: drop "
                "`grader_reasoning_effort`, or set `grader_reasoning=True`"
            )
        return self

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

    @property
    def template_sha256(self) -> str:
        """The sha256 of the grader prompt's template."""
        return TEMPLATE_SHA256

    @property
    def per_reply_template_sha256(self) -> str | None:
        """The sha256 of the per-reply prompt's template, for a grader called per reply (None per item)."""
        return PER_REPLY_TEMPLATE_SHA256 if self.calls != PER_ITEM else None

    @property
    def grows_output_cap(self) -> bool:
        """Whether a per-reply request's output cap grows with its rubric: for the reference's default cap, not
        one the user gave (and not for a reasoning grader, which has none)."""
        return self.calls != PER_ITEM and self.max_output_tokens is None and self.shape.max_output_tokens is not None

    def official_differences(self, adjustment: LengthAdjustment | None) -> list[Difference]:
        """How these settings, with `adjustment`, differ from HealthBench Professional's official configuration
        (whose grader is called once per rubric item, as every official grading is)."""
        found = differences(self.model_dump(include={"model", "reasoning_effort", "api"}), adjustment)
        if self.calls != PER_ITEM:
            found.insert(0, Difference("grader calls", self.calls, PER_ITEM))
        return found

    def build(
        self,
        cache: VerdictCache | None = None,
        budget: Budget | Budgets | None = None,
        wrap: Callable[[ApiClient], Completer] | None = None,
        *,
        slow_start: bool = True,
    ) -> Grader:
        """A grader with a client of its own, under `budget` if given, else a budget of `concurrency`; `wrap`
        turns the live client into another way of sending (the Batch API); `slow_start` as `ApiClient` takes it."""
        live = self.client(budget, slow_start=slow_start)
        client = live if wrap is None else wrap(live)
        return Grader(
            client,
            self.model,
            shape=self.shape,
            system_message=self.sends_system_message,
            cache=cache,
            calls=self.calls,
            prompt_cache_keys=self.prompt_cache_key,
            # A cap the user gave is every request's; the reference's default grows with a per-reply rubric.
            per_reply_caps=self.max_output_tokens is None,
        )

    def client(
        self, budget: Budget | Budgets | None = None, api: Api | None = None, *, slow_start: bool = True
    ) -> ApiClient:
        """The live client for the grader's endpoint and its API (`api` for another)."""
        return super().client(budget, api or APIS[self.api], slow_start=slow_start)


# How the reference asks its grader: a run asked otherwise records it in its identity.
REFERENCE_REQUEST = GraderConfig().request_settings()


class GradingOptions(BaseModel):
    """How replies are graded, as a user gives it: the grading commands' flags, `serve`'s, the Inspect task's
    arguments and the verifiers environment's settings are these fields.

    What is left unset comes from the grader's environment (`HEALTHBENCH_GRADER_*`; never `OPENAI_BASE_URL`),
    then from the subset's official settings (HealthBench Professional's), then from the reference's. The length
    adjustment takes both numbers or neither; with neither, Professional's official one applies to it alone.
    """

    model_config = ConfigDict(extra="forbid")

    grader_model: str | None = None
    grader_base_url: str | None = None
    grader_api: ApiName | None = None
    grader_reasoning: bool | None = None
    grader_reasoning_effort: Effort | None = None
    grader_max_output_tokens: OutputTokens | None = None
    grader_system_message: bool | None = None
    # `per-reply` grades a reply's whole rubric in one call: not the reference's grading, so never the official score.
    grader_calls: GraderCalls | None = None
    # False for an endpoint that refuses fields it does not know; the prompts are the same either way.
    grader_prompt_cache_key: bool | None = None
    grader_concurrency: Concurrency | None = None
    grader_max_attempts: Attempts | None = None
    # Seconds per attempt (None: 120, or 600 for a reasoning grader; see `EndpointSettings.attempt_timeout`).
    grader_timeout: Timeout | None = None
    grader_rpm: RequestsPerMinute | None = None
    grader_tpm: TokensPerMinute | None = None
    # A Redis URL: each key's pace shared with every process naming it (the model's too, for `eval`).
    grader_pace_store: str | None = None
    length_adjustment_center: LengthCenter | None = None
    length_adjustment_penalty_per_500_chars: LengthPenalty | None = None
    no_length_adjustment: bool = False

    @field_validator("grader_model", "grader_base_url", "grader_pace_store")
    @classmethod
    def _not_empty(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Left unset, each has its default; given empty, it would silently become that default.
        if value is not None and not value.strip():
            raise SettingsError(f"`{info.field_name}` is empty: name one, or leave it unset for the default")
        return value

    def grader(self, subset: str | None, *, served: bool = False) -> GraderConfig:
        """The grader settings for `subset` (with `served`, for `serve`: see `GraderConfig.from_env`)."""
        given = {name.removeprefix("grader_"): value for name, value in self if name.startswith("grader_")}
        return GraderConfig.for_subset(subset, served=served, **given)

    def length_adjustment(self, subset: str | None) -> LengthAdjustment | None:
        """The length adjustment for `subset`: none with `no_length_adjustment`, else the settings given (both
        or neither), else the subset's official one (Professional's)."""
        center, penalty = self.length_adjustment_center, self.length_adjustment_penalty_per_500_chars
        if self.no_length_adjustment:
            if center is not None or penalty is not None:
                raise SettingsError(
                    "`no_length_adjustment` cannot be given with length adjustment settings "
                    "(`length_adjustment_center`, `length_adjustment_penalty_per_500_chars`)"
                )
            return None
        return length_adjustment_for(subset, center, penalty)

    def plan(self, subset: str | None, *, served: bool = False) -> GradingPlan:
        """How replies to tasks of `subset` (their kind: `professional` for a file in its schema too) are graded:
        the one place the front-end rules apply, for the command line, `serve` and the integrations alike."""
        grader = self.grader(subset, served=served)
        adjustment = self.length_adjustment(subset)
        differences = grader.official_differences(adjustment) if subset == PROFESSIONAL else None
        return GradingPlan(grader, adjustment, differences)


@dataclass(frozen=True)
class GradingPlan:
    """How a run grades: its grader settings, its length adjustment, and for a HealthBench Professional run how
    it differs from the official configuration (None for the other subsets, which have none)."""

    grader: GraderConfig
    length_adjustment: LengthAdjustment | None
    differences: list[Difference] | None
