"""The commands about physicians: `baseline` grades their completions, `meta-eval` measures the grader against
their labels."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import click

from healthbench.cli.bounds import bounded
from healthbench.cli.execute import execute, grading_command, print_estimate, unit
from healthbench.cli.failures import user_errors
from healthbench.cli.options import RunFlags, length_options, meta_grading, options, run_options
from healthbench.cli.render import Bar, download_bar, finish
from healthbench.cli.tasks import data_flag_offered, data_options, read_tasks, said_limit
from healthbench.data.loading import load_meta_rows
from healthbench.data.schema import MetaRow
from healthbench.data.select import select_rows
from healthbench.data.source import TaskSource
from healthbench.data.subsets import PROFESSIONAL
from healthbench.grading.agreement import MODEL_F1, PHYSICIAN_F1
from healthbench.grading.settings import GradingPlan
from healthbench.reporting.metamodes import side_by_side, side_by_side_lines
from healthbench.reporting.report import write_meta_report
from healthbench.runs.baselines import GROUP_DESCRIPTIONS, baseline_jobs, physician_jobs
from healthbench.runs.estimate import Unit
from healthbench.runs.folder import RunFolder
from healthbench.runs.metaeval import completion_groups, grade_meta_rows
from healthbench.runs.runner import RunOutcome
from healthbench.runs.session import BatchChoice, SessionResult, Wiring, run_session
from healthbench.runs.spec import BaselineSpec, DataSpec, Limit, run_spec


@click.command()
@click.option(
    "--group",
    type=click.IntRange(1, 3),
    help="Physician group: 1 wrote without reference completions, 2 and 3 were shown four (required, except "
    "for Professional, whose physicians wrote one response per task).",
)
@click.option("--references", is_flag=True, help="Grade the 4 reference completions the group was shown (2, 3).")
@data_options
@click.option("--limit", type=bounded(Limit), help="Grade N samples, chosen as the reference does.")
@run_options
@length_options
@grading_command
def baseline(
    group: int | None,
    references: bool,
    tasks: TaskSource,
    limit: int | None,
    run: RunFlags,
    plan: GradingPlan,
    batch: BatchChoice | None,
) -> None:
    """Grade the physicians' ideal completions of one group, the reference completions they were shown, or
    HealthBench Professional's physician responses."""
    if references and group == 1:
        raise click.UsageError(
            "--references: Group 1 physicians were shown no reference completions; use --group 2 or 3"
        )
    rows, data = read_tasks(tasks)
    professional = tasks.kind == PROFESSIONAL or any(row.physician_response is not None for row in rows)
    if group is None and not professional:
        raise click.UsageError("--group is required: which physicians' completions to grade (1, 2 or 3)")
    if group is None:
        if references:
            raise click.UsageError("--references needs --group 2 or 3; Professional has no reference completions")
        jobs = physician_jobs(rows, limit=limit)
        whose = BaselineSpec(completions="physician responses", group_description="HealthBench Professional")
    else:
        jobs = baseline_jobs(rows, group, references=references, limit=limit)
        completions = f"Group {group} {'reference' if references else 'physician ideal'} completions"
        whose = BaselineSpec(
            group=group, references=references, completions=completions, group_description=GROUP_DESCRIPTIONS[group]
        )
    said_limit(limit, len(jobs), f"{whose.completions} in the data")  # jobs are all there are when short
    if run.dry_run:
        print_estimate([unit(job) for job in jobs], plan.grader, run.prices, run.dry_run)
        return
    spec = run_spec("baseline", plan, data, seed=run.seed, limit=limit, baseline=whose)
    execute(jobs, run, spec, plan.grader, batch=batch)


# The meta-eval file of `meta-eval` and `judges`, read by `meta_rows`.
meta_data_options = options(
    click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Meta-eval JSONL file."),
    click.option("--subset", type=click.Choice(["meta"]), help="The official meta-eval file [default, unless --data]."),
)


def load_meta(data: Path | None, subset: str | None) -> tuple[list[MetaRow], str]:
    """The meta-eval rows (the official file unless --data) and the sha256 of their file."""
    from healthbench.data.cache import file_sha256
    from healthbench.data.subsets import load_meta_subset, subset_path

    if data is not None and subset is not None:
        raise click.UsageError("give at most one of --data PATH or --subset meta")
    if data is None:
        with data_flag_offered():
            return load_meta_subset(download_bar), file_sha256(subset_path("meta"))
    return load_meta_rows(data), file_sha256(data)


def meta_rows(data: Path | None, subset: str | None, limit: int | None) -> tuple[list[MetaRow], str]:
    """The meta-eval rows `meta_data_options` and --limit choose (said on stderr when --limit asks for more than
    there are), and the sha256 of their file."""
    all_rows, data_sha = load_meta(data, subset)
    said_limit(limit, len(all_rows), "rows in the data")
    return select_rows(all_rows, limit), data_sha


def meta_headline(metrics: dict[str, float | int]) -> str:
    """The meta-eval summary line."""
    model, physicians = metrics.get(MODEL_F1), metrics.get(PHYSICIAN_F1)
    grader = "undefined (the grader gave one verdict only)" if model is None else f"{model:.4f}"
    pooled = "undefined" if physicians is None else f"{physicians:.4f}"
    return f"grader macro F1 {grader} (physicians pooled: {pooled}) over {metrics['score:n_samples']} rows"


def meta_units(rows: Sequence[MetaRow], calls: str) -> list[Unit]:
    """What the dry run estimates of a meta-eval: a row per unit, or per reply the rows of each completion."""
    if calls != "per-reply":
        return [Unit(row.prompt, row.completion, [row.rubric]) for row in rows]
    groups = completion_groups(rows)
    return [Unit(rows[g[0]].prompt, rows[g[0]].completion, [rows[i].rubric for i in g]) for g in groups]


def _headline(calls: str) -> Callable[[dict[str, float | int]], str]:
    return lambda metrics: f"{calls}: {meta_headline(metrics)}"


def meta_session(
    rows: Sequence[MetaRow],
    plan: GradingPlan,
    folder: RunFolder,
    data: DataSpec,
    *,
    run: RunFlags,
    limit: int | None,
    batch: BatchChoice | None,
) -> SessionResult:
    """One session of a meta-eval run of `rows` (chosen with `limit`) in `folder` (under `run.out`), graded as
    `plan` says, with `run`'s seed, price table and progress bar, and its report: `meta-eval` runs one per
    grader-call mode, `judges` one per grader and mode."""
    spec = run_spec("meta-eval", plan, data, seed=run.seed, limit=limit)

    def start(wiring: Wiring) -> Awaitable[RunOutcome]:
        return grade_meta_rows(
            rows, wiring.grader, folder, seed=run.seed, progress=wiring.progress, status=wiring.status
        )

    return run_session(
        start,
        folder,
        spec,
        plan.grader,
        samples=len(rows),
        batch=batch,
        prices=run.prices,
        progress=Bar(run.progress),
        report=write_meta_report,
    )


@click.command(name="meta-eval")
@meta_data_options
@click.option("--limit", type=bounded(Limit), help="Grade N rows, chosen as the reference does.")
@run_options
@user_errors
@meta_grading
def meta_eval(
    data: Path | None,
    subset: str | None,
    limit: int | None,
    run: RunFlags,
    plans: list[GradingPlan],
    batch: BatchChoice | None,
) -> None:
    """Measure the grader's agreement with physicians (macro F1); run again on the same --out to resume. With
    --grader-calls both, per item and per reply, each in a folder under --out, then the two side by side."""
    rows, data_sha = meta_rows(data, subset, limit)
    both = len(plans) > 1
    if run.dry_run:
        for plan in plans:
            if both:
                click.echo(f"{plan.grader.calls}:")
            print_estimate(meta_units(rows, plan.grader.calls), plan.grader, run.prices, run.dry_run)
        return
    for plan in plans:
        plan.grader.check_pace_store()  # a shared pace out of reach stops the run before anything is sent
    data_spec = DataSpec(source=str(data) if data else "subset:meta", sha256=data_sha)
    results = [
        meta_session(
            rows,
            plan,
            RunFolder(run.out / plan.grader.calls if both else run.out),
            data_spec,
            run=run,
            limit=limit,
            batch=batch,
        )
        for plan in plans
    ]
    finished = [
        finish(result, _headline(plan.grader.calls) if both else meta_headline, "rows", stop=not both)
        for plan, result in zip(plans, results, strict=True)
    ]
    if not all(finished):
        sys.exit(1)
    if both and all(result.outcome.metrics is not None for result in results):
        figures = side_by_side([result.folder for result in results], seed=run.seed)
        click.echo("\n".join(side_by_side_lines(figures)))
