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
    HealthBenchError,
    NotGraded,
    OutputError,
    PolicyMisuse,
    QuotaExhausted,
    ServeError,
    SettingsError,
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
    assert str(UnknownTask("test", "p9")) == "no task with split 'test' and prompt_id 'p9'"
    assert str(UnknownTask("dev", splits=("test", "hard"))) == "no task with split 'dev': the splits are 'test', 'hard'"


def test_a_validator_raises_the_packages_error() -> None:
    with pytest.raises(ValidationError, match="takes no temperature") as caught:
        PolicyConfig(base_url="http://x/v1", model="o3", temperature=0.5)
    assert isinstance(caught.value.errors()[0]["ctx"]["error"], SettingsError)
