"""The package's errors: grouped by boundary, every name others raise still importable, a message written once."""

from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

from healthbench import errors
from healthbench.errors import (
    ConfigMismatch,
    DataError,
    EndpointError,
    GradingError,
    HealthBenchError,
    NotGraded,
    OutputError,
    PolicyMisuse,
    QuotaExhausted,
    ReplyGradingError,
    ServeError,
    SettingsError,
    UnknownPromptId,
    UnknownTask,
)
from healthbench.runs.policy import PolicyConfig

# Every name the package raised before the errors were grouped, with the boundary it is grouped under now.
GROUPS = {
    "DataError": DataError,
    "DownloadFailed": DataError,
    "SettingsError": SettingsError,
    "RequestFailed": EndpointError,
    "InvalidResponse": EndpointError,
    "UnreadableAnswer": EndpointError,
    "QuotaExhausted": EndpointError,
    "EndpointUnusable": EndpointError,
    "PolicyMisuse": EndpointError,
    "PaceStoreUnreachable": EndpointError,
    "Deferred": EndpointError,
    "GradingError": NotGraded,
    "ReplyGradingError": NotGraded,
    "SampleError": NotGraded,
    "CandidateError": NotGraded,
    "MetaGradingError": NotGraded,
    "RewriteError": NotGraded,
    "OutputUnusable": OutputError,
    "ConfigMismatch": OutputError,
    "OverLimit": ServeError,
    "SessionRefused": ServeError,
    "Interrupted": HealthBenchError,
}


def test_every_name_is_importable_and_grouped_by_its_boundary() -> None:
    for name, group in GROUPS.items():
        error = getattr(errors, name)
        assert issubclass(error, group), name
        assert issubclass(error, HealthBenchError), name


def test_the_module_holds_only_exceptions() -> None:
    classes = [
        value for value in vars(errors).values() if inspect.isclass(value) and value.__module__ == errors.__name__
    ]
    assert classes
    assert all(issubclass(value, HealthBenchError) for value in classes)


def test_bad_values_are_value_errors_as_pydantic_needs() -> None:
    assert issubclass(DataError, ValueError)
    assert issubclass(SettingsError, ValueError)
    assert issubclass(UnknownTask, DataError)


def test_the_quota_message_is_written_once_and_says_the_same_words() -> None:
    bare = "the account has no quota left (insufficient_quota)"
    assert str(QuotaExhausted()) == bare
    at = QuotaExhausted().at("http://x/v1")
    assert str(at) == f"http://x/v1: {bare}"
    kept = at.kept_in("out/store.sqlite")
    assert str(kept) == (
        f"http://x/v1: {bare}. Everything answered is kept in out/store.sqlite: add credit (or use another key), "
        "then run the same command again to go on from there."
    )


def test_messages_with_facts_as_fields() -> None:
    assert str(ConfigMismatch("seed: 0 -> 1")) == (
        "this output folder holds a run with other settings (seed: 0 -> 1). "
        "Use a new `out` folder, or run with the recorded settings to resume."
    )
    assert str(PolicyMisuse.refused_request("http://x/v1", "HTTP 401: bad key")) == (
        "http://x/v1 refused a request to the model (HTTP 401: bad key); no score is written."
    )
    assert str(UnknownTask("p9", "test")) == "prompt_id 'p9' is not in split 'test'"
    assert str(UnknownTask("p9", "dev", splits=("test", "hard"))) == (
        "prompt_id 'p9' is not in split 'dev': there is no such split here (the splits are 'test', 'hard')"
    )
    assert str(UnknownTask("p9", "test", splits=("test", "hard"))) == "prompt_id 'p9' is not in split 'test'"
    # One fact, one error: the trainers' rewards' name for it is the same class.
    assert UnknownPromptId is UnknownTask


def test_a_grading_error_redacted_keeps_its_class_and_lasting() -> None:
    key = "sk-secret-0123456789"
    plain = GradingError("t1", "Says rest.", f"HTTP 400: bad key {key}", lasting=True)
    redacted = plain.redacted(key)
    assert type(redacted) is GradingError and redacted.lasting and key not in str(redacted)
    assert "[redacted]" in redacted.cause and redacted.criterion == "Says rest."
    whole = ReplyGradingError("t1", 12, f"echoed {key}", lasting=True)
    redacted = whole.redacted(key)
    assert type(redacted) is ReplyGradingError and redacted.lasting and redacted.items == 12
    assert key not in str(redacted) and "its 12 rubric items" in str(redacted)
    assert plain.redacted("other") is plain and plain.redacted(None) is plain


def test_a_validator_raises_the_packages_error() -> None:
    with pytest.raises(ValidationError, match="takes no temperature") as caught:
        PolicyConfig(base_url="http://x/v1", model="o3", temperature=0.5)
    assert isinstance(caught.value.errors()[0]["ctx"]["error"], SettingsError)
