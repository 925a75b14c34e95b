"""Run-folder contents written as the files hold them (JSON objects), read into the typed records the readers
take: tests state their inputs the way a run folder states them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from healthbench.grading.aggregate import aggregate_samples
from healthbench.grading.scoring import LengthAdjustment
from healthbench.reporting import report
from healthbench.runs.records import AgreementRecord, FailureRecord, MetaRecord, RunRecord, SampleRecord, UsageRecord

Json = Mapping[str, Any]


def samples(records: Sequence[Json]) -> list[SampleRecord]:
    """Lines of a graded run's results.jsonl."""
    return [SampleRecord.model_validate(record) for record in records]


def metas(records: Sequence[Json]) -> list[MetaRecord]:
    """Lines of a meta-eval's results.jsonl."""
    return [MetaRecord.model_validate(record) for record in records]


def run(value: Json | None) -> RunRecord | None:
    """A run.json, of either schema version; an empty object is no run.json."""
    return RunRecord.model_validate(dict(value)) if value else None


def usage(value: Json | None) -> UsageRecord | None:
    """A usage.json."""
    return UsageRecord.model_validate(value) if value else None


def failures(values: Sequence[Json]) -> list[FailureRecord]:
    """Lines of failures.jsonl."""
    return [FailureRecord.model_validate(value) for value in values]


def render_report(
    metrics: Mapping[str, float | int] | None,
    records: Sequence[Json],
    run_json: Json | None,
    spent: Json | None = None,
    failed: Sequence[Json] = (),
) -> str:
    """`report.render_report` of a run folder's files."""
    return report.render_report(
        dict(metrics or {}) or None, samples(records), run(run_json), usage(spent), failures(failed)
    )


def render_meta_report(
    metrics: Mapping[str, float | int] | None,
    agreement: Json,
    run_json: Json | None,
    records: Sequence[Json] = (),
    failed: Sequence[Json] = (),
    spent: Json | None = None,
) -> str:
    """`report.render_meta_report` of a meta-eval folder's files."""
    return report.render_meta_report(
        dict(metrics or {}) or None,
        AgreementRecord.model_validate(agreement) if agreement else None,
        run(run_json),
        metas(records),
        failures(failed),
        usage(spent),
    )


def aggregate_records(
    records: Sequence[Json],
    *,
    seed: int,
    length_adjustment: LengthAdjustment | None = None,
    model_samples: bool = False,
) -> dict[str, float | int]:
    """`aggregate_samples` of results.jsonl lines."""
    return aggregate_samples(
        samples(records), seed=seed, length_adjustment=length_adjustment, model_samples=model_samples
    )
