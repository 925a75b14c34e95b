"""The commands that grade replies: `grade` (fixed replies) and `eval` (a model's replies, sampled first)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import click

from healthbench.cli.bounds import bounded
from healthbench.cli.execute import execute, grading_command, print_estimate, unit
from healthbench.cli.options import RunFlags, length_options, policy_from_flags, run_options, sampling_options
from healthbench.cli.tasks import data_options, read_tasks, said_limit
from healthbench.data.responses import load_responses
from healthbench.data.schema import Row
from healthbench.data.select import select_rows
from healthbench.data.source import TaskSource
from healthbench.grading.settings import GradingPlan
from healthbench.runs.runner import Job
from healthbench.runs.session import BatchChoice
from healthbench.runs.spec import Limit, Repeats, run_spec


def replied_rows(
    rows: Sequence[Row], responses: Path, strict: bool, limit: int | None = None
) -> tuple[list[Row], dict[str, str]]:
    """The tasks both the data and the replies file name, in the data's order, and the replies; says on stderr
    how many replies and tasks are left out (with `strict`, a reply naming a task outside the data is an error),
    and how many of them `limit` (--limit) then grades."""
    replies = load_responses(responses, {row.prompt_id for row in rows}, strict=strict)
    replied = [row for row in rows if row.prompt_id in replies]
    ignored, missing = len(replies) - len(replied), len(rows) - len(replied)
    if ignored or missing:
        graded = "the" if limit is None or limit >= len(replied) else f"{limit} (--limit) of the"
        click.echo(
            f"grading {graded} {len(replied)} tasks both the data and {responses.name} name: {ignored} of "
            f"{len(replies)} replies were not graded (tasks outside the data, ignored); {missing} of the "
            f"data's {len(rows)} tasks have no reply (not graded)",
            err=True,
        )
    return replied, replies


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
@grading_command
def grade(
    tasks: TaskSource,
    responses: Path,
    strict: bool,
    report: bool,
    run: RunFlags,
    plan: GradingPlan,
    batch: BatchChoice | None,
) -> None:
    """Grade fixed replies to the tasks both the data and the replies name; results.jsonl grows as samples
    finish, then metrics.json is written."""
    rows, data = read_tasks(tasks)
    replied, replies = replied_rows(rows, responses, strict)
    jobs = [Job(row, 0, replies[row.prompt_id]) for row in replied]
    if run.dry_run:
        print_estimate([unit(job) for job in jobs], plan.grader, run.prices, run.dry_run)
        return
    spec = run_spec("grade", plan, data, seed=run.seed, responses=str(responses))
    execute(jobs, run, spec, plan.grader, batch=batch, html=report)


@click.command(name="eval")
@click.option("--model", required=True, help="The model to evaluate.")
@click.option(
    "--base-url", help="Its OpenAI-compatible endpoint [default: $OPENAI_BASE_URL or OpenAI]; key $OPENAI_API_KEY."
)
@data_options
@click.option("--limit", type=bounded(Limit), help="Evaluate N tasks, chosen as the reference does.")
@click.option("--n-repeats", type=bounded(Repeats), default=1, show_default=True, help="Samples per task.")
@sampling_options
@run_options
@length_options
@grading_command
def evaluate(
    model: str,
    base_url: str | None,
    tasks: TaskSource,
    limit: int | None,
    n_repeats: int,
    system_message: str | None,
    temperature: float | None,
    max_tokens: int | None,
    reasoning: bool | None,
    reasoning_effort: str | None,
    policy_concurrency: int | None,
    rpm: float | None,
    tpm: float | None,
    timeout: float | None,
    policy_batch: bool,
    policy_errors: str,
    run: RunFlags,
    plan: GradingPlan,
    batch: BatchChoice | None,
) -> None:
    """Sample replies from a model and grade them; run again on the same --out to resume."""
    if policy_batch:
        if batch is None:
            raise click.UsageError("--policy-batch needs --batch")
        batch = dataclasses.replace(batch, policy=True)
    # The model's settings first: one it cannot take stops the command before the data is read.
    policy_config = policy_from_flags(
        model,
        base_url,
        plan.grader,
        system_message=system_message,
        temperature=temperature,
        max_tokens=max_tokens,
        reasoning=reasoning,
        reasoning_effort=reasoning_effort,
        policy_concurrency=policy_concurrency,
        rpm=rpm,
        tpm=tpm,
        timeout=timeout,
        policy_errors=policy_errors,
    )
    all_rows, data = read_tasks(tasks)
    said_limit(limit, len(all_rows), "tasks in the data")
    rows = select_rows(all_rows, limit)
    if run.dry_run:
        # A unit per task, its repeats counted: the estimate takes the time and memory of the tasks alone.
        units = [unit(Job(row), times=n_repeats) for row in rows]
        print_estimate(units, plan.grader, run.prices, run.dry_run, policy_config, tasks=len(rows))
        return
    jobs = [Job(row, repeat) for repeat in range(n_repeats) for row in rows]
    spec = run_spec("eval", plan, data, seed=run.seed, limit=limit, n_repeats=n_repeats, policy=policy_config)
    execute(jobs, run, spec, plan.grader, policy=policy_config, batch=batch)
