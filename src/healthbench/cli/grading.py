"""The commands that grade: `grade` (fixed replies), `eval` (a model's replies), `baseline` (physicians'
replies) and `meta-eval` (the grader against physicians' labels)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import click

from healthbench.cli.options import (
    data_options,
    grading,
    length_adjustment,
    length_options,
    load_tasks,
    official,
    run_options,
    user_errors,
)
from healthbench.cli.render import Bar, finish
from healthbench.data.loading import load_meta_rows
from healthbench.data.responses import load_responses
from healthbench.data.schema import MetaRow
from healthbench.data.select import select_rows
from healthbench.data.subsets import PROFESSIONAL
from healthbench.grading.agreement import MODEL_F1, PHYSICIAN_F1
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import GraderConfig
from healthbench.reporting.report import write_meta_report, write_report
from healthbench.runs.baselines import GROUP_DESCRIPTIONS, baseline_jobs, physician_jobs
from healthbench.runs.estimate import Unit, dry_run
from healthbench.runs.folder import RunFolder
from healthbench.runs.metaeval import grade_meta_rows
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.pricing import load_prices
from healthbench.runs.runner import Job, RunOutcome
from healthbench.runs.session import BatchChoice, Wiring, jobs_start, run_session


def _adjusted(
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


@click.command()
@data_options
@click.option(
    "--responses",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='JSONL of {"prompt_id": ..., "response": ...}.',
)
@click.option("--strict", is_flag=True, help="Refuse replies that name a task outside the data.")
@run_options
@length_options
@click.option("--report", is_flag=True, help="Also write report.html (healthbench report DIR does it later).")
@user_errors
@grading
def grade(
    data: Path | None,
    subset: str | None,
    responses: Path,
    strict: bool,
    report: bool,
    out: Path,
    seed: int,
    prices: Path | None,
    progress: bool,
    dry_run: bool,
    grader: GraderConfig,
    batch: BatchChoice | None,
    **length: Any,
) -> None:
    """Grade fixed replies to the tasks both the data and the replies name; results.jsonl grows as samples
    finish, then metrics.json is written."""
    adjustment, recorded = _adjusted(subset, grader, length)
    rows, _ = load_tasks(data, subset)
    replies = load_responses(responses, {row.prompt_id for row in rows}, strict=strict)
    jobs = [Job(row, 0, replies[row.prompt_id]) for row in rows if row.prompt_id in replies]
    ignored, missing = len(replies) - len(jobs), len(rows) - len(jobs)
    if ignored or missing:
        click.echo(
            f"grading the {len(jobs)} tasks both the data and {responses.name} name: {ignored} of "
            f"{len(replies)} replies were not graded (tasks outside the data, ignored); {missing} of the "
            f"data's {len(rows)} tasks have no reply (not graded)",
            err=True,
        )
    if dry_run:
        print_estimate([_unit(job) for job in jobs], grader, prices)
        return
    identity = {"command": "grade"} | grader.identity()
    extra = {"responses": str(responses), "data": _data_name(data, subset)} | recorded
    _execute(
        jobs,
        out,
        grader,
        identity,
        batch=batch,
        seed=seed,
        prices=prices,
        progress=progress,
        extra=extra,
        html=report,
        length_adjustment=adjustment,
    )


@click.command(name="eval")
@click.option("--model", required=True, help="The model to evaluate.")
@click.option(
    "--base-url", help="Its OpenAI-compatible endpoint [default: $OPENAI_BASE_URL or OpenAI]; key $OPENAI_API_KEY."
)
@data_options
@click.option("--limit", type=click.IntRange(min=1), help="Evaluate N tasks, chosen as the reference does.")
@click.option("--n-repeats", type=click.IntRange(min=1), default=1, show_default=True, help="Samples per task.")
@click.option("--system-message", help="Sent to the model first; it also heads the graded transcript.")
@click.option("--temperature", type=float, help="Sampling temperature [default: the provider's].")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Reply length cap.")
@click.option("--reasoning/--no-reasoning", default=None, help="Treat as a reasoning model [default: by name].")
@click.option("--reasoning-effort", type=click.Choice(["minimal", "low", "medium", "high"]))
@click.option("--policy-concurrency", type=click.IntRange(min=1), default=32, show_default=True)
@click.option(
    "--rpm",
    type=click.FloatRange(min=0, min_open=True),
    help="The model key's requests-per-minute limit [default: learned].",
)
@click.option(
    "--tpm",
    type=click.FloatRange(min=0, min_open=True),
    help="The model key's tokens-per-minute limit [default: learned].",
)
@click.option("--policy-batch", is_flag=True, help="With --batch, sample the model's replies in batches too.")
@click.option(
    "--policy-errors",
    type=click.Choice(["grade", "fail"]),
    default="grade",
    show_default=True,
    help="A prompt the model's provider refuses (invalid_prompt, a content filter, a context too long): grade "
    "the reference's reply 'No response (bad request).' for it, or fail the sample (no score).",
)
@run_options
@length_options
@user_errors
@grading
def evaluate(
    model: str,
    base_url: str | None,
    data: Path | None,
    subset: str | None,
    limit: int | None,
    n_repeats: int,
    system_message: str | None,
    temperature: float | None,
    max_tokens: int | None,
    reasoning: bool | None,
    reasoning_effort: str | None,
    policy_concurrency: int,
    rpm: float | None,
    tpm: float | None,
    policy_batch: bool,
    policy_errors: str,
    out: Path,
    seed: int,
    prices: Path | None,
    progress: bool,
    dry_run: bool,
    grader: GraderConfig,
    batch: BatchChoice | None,
    **length: Any,
) -> None:
    """Sample replies from a model and grade them; run again on the same --out to resume."""
    if policy_batch:
        if batch is None:
            raise click.UsageError("--policy-batch needs --batch")
        batch = dataclasses.replace(batch, policy=True)
    adjustment, recorded = _adjusted(subset, grader, length)
    all_rows, data_sha = load_tasks(data, subset)
    rows = select_rows(all_rows, limit)
    policy_config = PolicyConfig.from_env(
        base_url=base_url,
        model=model,
        system_message=system_message,
        temperature=temperature,
        max_tokens=max_tokens,
        reasoning=reasoning,
        reasoning_effort=reasoning_effort,
        concurrency=policy_concurrency,
        rpm=rpm,
        tpm=tpm,
        max_attempts=grader.max_attempts,  # the one --max-attempts flag bounds both sides
        policy_errors=policy_errors,
    )
    jobs = [Job(row, repeat) for repeat in range(n_repeats) for row in rows]
    if dry_run:
        print_estimate([_unit(job) for job in jobs], grader, prices, policy_config, tasks=len(rows))
        return
    identity = (
        {"command": "eval", "data_sha256": data_sha, "limit": limit, "n_repeats": n_repeats}
        | policy_config.identity()
        | grader.identity()
    )
    extra = {"data": _data_name(data, subset), "base_url": policy_config.base_url, "policy_errors": policy_errors}
    extra |= recorded
    _execute(
        jobs,
        out,
        grader,
        identity,
        policy=policy_config,
        batch=batch,
        seed=seed,
        prices=prices,
        progress=progress,
        extra=extra,
        length_adjustment=adjustment,
    )


def _data_name(data: Path | None, subset: str | None) -> str:
    return str(data) if data else f"subset:{subset}"


def _unit(job: Job) -> Unit:
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


def _execute(
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


@click.command()
@click.option(
    "--group",
    type=click.IntRange(1, 3),
    help="Physician group: 1 wrote without reference completions, 2 and 3 were shown four (required, except "
    "for Professional, whose physicians wrote one response per task).",
)
@click.option("--references", is_flag=True, help="Grade the 4 reference completions the group was shown (2, 3).")
@data_options
@click.option("--limit", type=click.IntRange(min=1), help="Grade N samples, chosen as the reference does.")
@run_options
@length_options
@user_errors
@grading
def baseline(
    group: int | None,
    references: bool,
    data: Path | None,
    subset: str | None,
    limit: int | None,
    out: Path,
    seed: int,
    prices: Path | None,
    progress: bool,
    dry_run: bool,
    grader: GraderConfig,
    batch: BatchChoice | None,
    **length: Any,
) -> None:
    """Grade the physicians' ideal completions of one group, the reference completions they were shown, or
    HealthBench Professional's physician responses."""
    if references and group == 1:
        raise click.UsageError(
            "--references: Group 1 physicians were shown no reference completions; use --group 2 or 3"
        )
    adjustment, recorded = _adjusted(subset, grader, length)
    rows, data_sha = load_tasks(data, subset)
    professional = subset == PROFESSIONAL or any(row.physician_response is not None for row in rows)
    if group is None and not professional:
        raise click.UsageError("--group is required: which physicians' completions to grade (1, 2 or 3)")
    if group is None:
        if references:
            raise click.UsageError("--references needs --group 2 or 3; Professional has no reference completions")
        jobs = physician_jobs(rows, limit=limit)
        described = {"completions": "physician responses", "group_description": "HealthBench Professional"}
    else:
        jobs = baseline_jobs(rows, group, references=references, limit=limit)
        completions = f"Group {group} {'reference' if references else 'physician ideal'} completions"
        described = {"completions": completions, "group_description": GROUP_DESCRIPTIONS[group]}
    identity = {
        "command": "baseline",
        "group": group,
        "references": references,
        "data_sha256": data_sha,
        "limit": limit,
    } | grader.identity()
    extra = {"data": _data_name(data, subset)} | described | recorded
    if dry_run:
        print_estimate([_unit(job) for job in jobs], grader, prices)
        return
    _execute(
        jobs,
        out,
        grader,
        identity,
        batch=batch,
        seed=seed,
        prices=prices,
        progress=progress,
        extra=extra,
        length_adjustment=adjustment,
    )


def _load_meta(data: Path | None, subset: str | None) -> tuple[list[MetaRow], str]:
    """The meta-eval rows (the official file unless --data) and the sha256 of their file."""
    from healthbench.data.subsets import file_sha256, load_meta_subset, subset_path

    if data is not None and subset is not None:
        raise click.UsageError("give at most one of --data PATH or --subset meta")
    if data is None:
        return load_meta_subset(), file_sha256(subset_path("meta"))
    return load_meta_rows(data), file_sha256(data)


def meta_headline(metrics: dict[str, float | int]) -> str:
    """The meta-eval summary line."""
    model, physicians = metrics.get(MODEL_F1), metrics.get(PHYSICIAN_F1)
    grader = "undefined (the grader gave one verdict only)" if model is None else f"{model:.4f}"
    pooled = "undefined" if physicians is None else f"{physicians:.4f}"
    return f"grader macro F1 {grader} (physicians pooled: {pooled}) over {metrics['score:n_samples']} rows"


@click.command(name="meta-eval")
@click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Meta-eval JSONL file.")
@click.option("--subset", type=click.Choice(["meta"]), help="The official meta-eval file [default, unless --data].")
@click.option("--limit", type=click.IntRange(min=1), help="Grade N rows, chosen as the reference does.")
@run_options
@user_errors
@grading
def meta_eval(
    data: Path | None,
    subset: str | None,
    limit: int | None,
    out: Path,
    seed: int,
    prices: Path | None,
    progress: bool,
    dry_run: bool,
    grader: GraderConfig,
    batch: BatchChoice | None,
) -> None:
    """Measure the grader's agreement with physicians (macro F1); run again on the same --out to resume."""
    all_rows, data_sha = _load_meta(data, subset)
    rows = select_rows(all_rows, limit)
    if dry_run:
        print_estimate([Unit(row.prompt, row.completion, [row.rubric]) for row in rows], grader, prices)
        return
    identity = {"command": "meta-eval", "data_sha256": data_sha, "limit": limit} | grader.identity()
    folder = RunFolder(out)

    def start(wiring: Wiring) -> Awaitable[RunOutcome]:
        return grade_meta_rows(rows, wiring.grader, folder, seed=seed, progress=wiring.progress, status=wiring.status)

    result = run_session(
        start,
        folder,
        grader,
        identity,
        samples=len(rows),
        batch=batch,
        seed=seed,
        prices=prices,
        extra={"data": str(data) if data else "subset:meta"},
        progress=Bar(progress),
        report=write_meta_report,
    )
    finish(result, meta_headline, "rows")
