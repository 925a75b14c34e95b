"""How a grading command runs: its length adjustment and what run.json records of it, its dry run, and its
jobs in a session, with what it says when the session is over."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from healthbench.cli.options import length_adjustment, official
from healthbench.cli.render import Bar, finish
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig
from healthbench.reporting.report import write_report
from healthbench.runs.estimate import Unit, dry_run
from healthbench.runs.folder import RunFolder
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.pricing import load_prices
from healthbench.runs.runner import Job
from healthbench.runs.session import BatchChoice, jobs_start, run_session


def adjusted(
    subset: str | None, grader: GraderConfig, flags: dict[str, Any]
) -> tuple[LengthAdjustment | None, dict[str, Any]]:
    """The run's length adjustment, and what run.json records of it and of the official configuration."""
    adjustment = length_adjustment(
        subset,
        flags["length_adjustment_center"],
        flags["length_adjustment_penalty_per_500_chars"],
        flags["no_length_adjustment"],
    )
    recorded = {"length_adjustment": None if adjustment is None else adjustment.as_dict()}
    return adjustment, recorded | official(subset, grader, adjustment)


def data_name(data: Path | None, subset: str | None) -> str:
    return str(data) if data else f"subset:{subset}"


def unit(job: Job) -> Unit:
    return Unit(job.row.prompt, job.reply, [item.criterion for item in job.row.rubrics])


def print_estimate(
    units: Sequence[Unit],
    grader: GraderConfig,
    prices: Path | None,
    policy: PolicyConfig | None = None,
    **counts: int,
) -> None:
    """The `--dry-run` answer, as JSON: nothing is sent and nothing is written."""
    click.echo(json.dumps(counts | dry_run(units, grader, load_prices(prices), policy), indent=2))


def execute(
    jobs: Sequence[Job],
    out: Path,
    grader: GraderConfig,
    identity: dict[str, Any],
    *,
    policy: PolicyConfig | None = None,
    batch: BatchChoice | None,
    seed: int,
    prices: Path | None,
    progress: bool,
    extra: dict[str, Any],
    html: bool = True,
    length_adjustment: LengthAdjustment | None = None,
) -> None:
    """Run jobs in `out` and say how it went (exit 1 on failures); with `html`, write the report too."""
    for config in (grader, policy):
        if config is not None:
            config.check_pace_store()  # a shared pace out of reach stops the run before anything is sent
    folder = RunFolder(out)
    start = jobs_start(jobs, folder, seed=seed, sample_first=batch is not None, length_adjustment=length_adjustment)
    result = run_session(
        start,
        folder,
        grader,
        identity,
        samples=len(jobs),
        policy=policy,
        batch=batch,
        seed=seed,
        prices=prices,
        extra=extra,
        progress=Bar(progress),
        report=write_report if html else None,
    )
    kind = "score" if length_adjustment is None else "length-adjusted score"

    def headline(metrics: dict[str, float | int]) -> str:
        std, n = metrics["score:bootstrap_std"], metrics["score:n_samples"]
        return f"{kind} {metrics['score']:.4f} ± {std:.4f} over {n} samples"

    finish(result, headline, "samples")
