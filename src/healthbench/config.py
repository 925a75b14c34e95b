"""Grader settings, and the one place where a grader and its client are built.

The grader's endpoint and key are its own: `HEALTHBENCH_GRADER_BASE_URL` and `HEALTHBENCH_GRADER_API_KEY`
(else `OPENAI_API_KEY`). `OPENAI_BASE_URL` is never read here, because trainers and harnesses point it at
the policy being evaluated, and a grader silently following it would grade with the wrong model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from .client import OPENAI_BASE_URL, Budget, ChatClient, Completer, client_for
from .grading import DEFAULT_GRADER_MODEL, TEMPLATE_SHA256, Grader, VerdictCache

DEFAULT_CONCURRENCY = 64


class GraderConfig(BaseModel):
    """Everything that decides how replies are graded. The key is a secret and is never serialised."""

    model_config = ConfigDict(frozen=True)

    model: str = DEFAULT_GRADER_MODEL
    base_url: str = OPENAI_BASE_URL
    api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1)
    max_attempts: int = Field(default=12, ge=1)
    timeout: float = Field(default=120.0, gt=0)

    @classmethod
    def from_env(
        cls,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        **overrides: Any,
    ) -> GraderConfig:
        """Settings from explicit values, falling back to the grader's own environment variables."""
        env = os.environ
        return cls(
            model=model or env.get("HEALTHBENCH_GRADER_MODEL") or DEFAULT_GRADER_MODEL,
            base_url=base_url or env.get("HEALTHBENCH_GRADER_BASE_URL") or OPENAI_BASE_URL,
            api_key=SecretStr(key)
            if (key := api_key or env.get("HEALTHBENCH_GRADER_API_KEY") or env.get("OPENAI_API_KEY"))
            else None,
            **{name: value for name, value in overrides.items() if value is not None},
        )

    def identity(self) -> dict[str, Any]:
        """What decides the verdicts: recorded with a run, and compared on resume."""
        return {"grader_model": self.model, "template_sha256": TEMPLATE_SHA256}

    def describe(self) -> dict[str, Any]:
        """What a run reports about its grader (never the key)."""
        return self.identity() | {"grader_base_url": self.base_url}

    def build(
        self,
        cache: VerdictCache | None = None,
        budget: Budget | None = None,
        wrap: Callable[[ChatClient], Completer] | None = None,
    ) -> Grader:
        """A grader with a client of its own, under `budget` if given, else a budget of `concurrency`; `wrap`
        turns the live client into another way of sending (the Batch API)."""
        chat = self.chat(budget)
        return Grader(chat if wrap is None else wrap(chat), self.model, cache=cache)

    def chat(self, budget: Budget | None = None) -> ChatClient:
        """The live client for the grader's endpoint: its key, concurrency, timeout and retry table."""
        return client_for(self, budget)
