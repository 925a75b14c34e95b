"""HealthBench: OpenAI's physician-rubric health benchmark, graded exactly as the reference does.

The public API: rows and their loading, the grader and its settings, one graded sample (`grade_sample`), pure
scoring, the client of an OpenAI-compatible endpoint, and every error the package raises (`HealthBenchError`);
training splits of the rows (`split_rows`, `assign_splits`).
"""

from typing import Any

from healthbench.api.batch.client import BatchClient
from healthbench.api.batch.records import BatchSettings
from healthbench.api.client import ApiClient, Completer, Retries
from healthbench.api.wire import CHAT, RESPONSES, Api, Shape, Usage, is_reasoning_model
from healthbench.data.loading import load_meta_rows, load_professional_rows, load_rows
from healthbench.data.schema import IdealCompletions, Message, MetaRow, Row, RubricItem
from healthbench.data.splits import SPLITS, SplitName, assign_splits, split_rows
from healthbench.data.subsets import SUBSETS, TASK_SUBSETS, load_meta_subset, load_subset, subset_path
from healthbench.errors import (
    DataError,
    EndpointError,
    GradingError,
    HealthBenchError,
    InvalidResponse,
    MissingExtra,
    NotGraded,
    OutputError,
    RequestFailed,
    ServeError,
    SettingsError,
)
from healthbench.grading.aggregate import aggregate_samples
from healthbench.grading.grader import DEFAULT_GRADER_MODEL, GradedItem, GradedReply, Grader
from healthbench.grading.official import PROFESSIONAL_GRADER
from healthbench.grading.prompt import (
    TEMPLATE,
    TEMPLATE_SHA256,
    grader_prompt,
    render_conversation,
    rubric_item_text,
    transcript_with_reply,
)
from healthbench.grading.sample import GradedSample, grade_sample
from healthbench.grading.scoring import (
    PROFESSIONAL_LENGTH_ADJUSTMENT,
    LengthAdjustment,
    aggregate,
    clipped_mean,
    score,
    task_metrics,
)
from healthbench.grading.settings import GraderConfig, GradingOptions, GradingPlan
from healthbench.grading.verdict import Verdict, parse_verdict
from healthbench.runs.folder import RunFolder
from healthbench.runs.records import FailureRecord, MetaRecord, RunRecord, SampleRecord, UsageRecord
from healthbench.runs.spec import RunSpec, run_spec

__all__ = [
    "CHAT",
    "DEFAULT_GRADER_MODEL",
    "PROFESSIONAL_GRADER",
    "PROFESSIONAL_LENGTH_ADJUSTMENT",
    "RESPONSES",
    "SPLITS",
    "SUBSETS",
    "TASK_SUBSETS",
    "TEMPLATE",
    "TEMPLATE_SHA256",
    "Api",
    "ApiClient",
    "BatchClient",
    "BatchSettings",
    "Completer",
    "DataError",
    "EndpointError",
    "FailureRecord",
    "GradedItem",
    "GradedReply",
    "GradedSample",
    "Grader",
    "GraderConfig",
    "GradingError",
    "GradingOptions",
    "GradingPlan",
    "HealthBenchEnv",
    "HealthBenchError",
    "HealthBenchTaskset",
    "IdealCompletions",
    "InvalidResponse",
    "LengthAdjustment",
    "Message",
    "MetaRecord",
    "MetaRow",
    "MissingExtra",
    "NotGraded",
    "OutputError",
    "RequestFailed",
    "Retries",
    "Row",
    "RubricItem",
    "RunFolder",
    "RunRecord",
    "RunSpec",
    "SampleRecord",
    "ServeError",
    "SettingsError",
    "Shape",
    "SplitName",
    "Usage",
    "UsageRecord",
    "Verdict",
    "aggregate",
    "aggregate_samples",
    "assign_splits",
    "clipped_mean",
    "grade_sample",
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
    "run_spec",
    "score",
    "split_rows",
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
    from healthbench.integrations.verifiers_env import load_environment as load

    return load(**settings)


def __getattr__(name: str) -> Any:
    if name in _VERIFIERS_EXPORTS:
        from healthbench.integrations import verifiers_env

        return getattr(verifiers_env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
