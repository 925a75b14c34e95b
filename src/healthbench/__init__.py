"""HealthBench: OpenAI's physician-rubric health benchmark, graded exactly as the reference does."""

from typing import Any

from .batch import BatchClient
from .batchapi import BatchSettings
from .client import ChatClient, Completer, RequestFailed, RetryPolicy
from .config import PROFESSIONAL_GRADER, GraderConfig
from .data import (
    DataError,
    IdealCompletions,
    Message,
    MetaRow,
    Row,
    RubricItem,
    load_meta_rows,
    load_professional_rows,
    load_rows,
)
from .grading import (
    DEFAULT_GRADER_MODEL,
    TEMPLATE,
    TEMPLATE_SHA256,
    GradedItem,
    GradedReply,
    Grader,
    GradingError,
    Verdict,
    grader_prompt,
    parse_verdict,
    render_conversation,
    rubric_item_text,
    transcript_with_reply,
)
from .scoring import PROFESSIONAL_LENGTH_ADJUSTMENT, LengthAdjustment, aggregate, clipped_mean, score, task_metrics
from .subsets import SUBSETS, TASK_SUBSETS, load_meta_subset, load_subset, subset_path
from .wire import CHAT, RESPONSES, Api, InvalidResponse, Shape, Usage, is_reasoning_model

__all__ = [
    "CHAT",
    "DEFAULT_GRADER_MODEL",
    "PROFESSIONAL_GRADER",
    "PROFESSIONAL_LENGTH_ADJUSTMENT",
    "RESPONSES",
    "SUBSETS",
    "TASK_SUBSETS",
    "TEMPLATE",
    "TEMPLATE_SHA256",
    "Api",
    "BatchClient",
    "BatchSettings",
    "ChatClient",
    "Completer",
    "DataError",
    "GradedItem",
    "GradedReply",
    "Grader",
    "GraderConfig",
    "GradingError",
    "HealthBenchEnv",
    "HealthBenchTaskset",
    "IdealCompletions",
    "InvalidResponse",
    "LengthAdjustment",
    "Message",
    "MetaRow",
    "RequestFailed",
    "RetryPolicy",
    "Row",
    "RubricItem",
    "Shape",
    "Usage",
    "Verdict",
    "aggregate",
    "clipped_mean",
    "grader_prompt",
    "is_reasoning_model",
    "load_environment",
    "load_meta_rows",
    "load_meta_subset",
    "load_professional_rows",
    "load_rows",
    "load_subset",
    "parse_verdict",
    "render_conversation",
    "rubric_item_text",
    "score",
    "subset_path",
    "task_metrics",
    "transcript_with_reply",
]

# verifiers finds a taskset by importing the package its id names and taking the Taskset and Env its `__all__`
# exports (`vf-eval healthbench`); they come from `verifiers_env` only when asked for, so nothing else here
# needs verifiers installed.
_VERIFIERS_EXPORTS = ("HealthBenchEnv", "HealthBenchTaskset")


def load_environment(**settings: Any) -> Any:
    """The HealthBench verifiers environment (needs `healthbench[verifiers]`); see
    `healthbench.verifiers_env.load_environment` for the settings."""
    from .verifiers_env import load_environment as load

    return load(**settings)


def __getattr__(name: str) -> Any:
    if name in _VERIFIERS_EXPORTS:
        from . import verifiers_env

        return getattr(verifiers_env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
