"""`healthbench probe`: how much reward each known trick wins against the grader, before a policy learns it: the
fixed tricks of `grading.transforms`, and with --attacker the strategies a model rewrites each reply by (made once,
into OUT/attacker/, before the replies are graded; with --model, the model's replies are sampled first)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from healthbench.cli.attacker import (
    attacker_from_flag,
    attacker_option,
    chosen_tricks,
    print_attack_estimate,
    run_attack,
)
from healthbench.cli.bounds import bounded
from healthbench.cli.execute import execute, grading_command, print_estimate
from healthbench.cli.grading import replied_rows
from healthbench.cli.options import RunFlags, length_options, policy_from_flags, run_options, sampling_options
from healthbench.cli.tasks import data_options, read_tasks, said_limit
from healthbench.data.schema import Row
from healthbench.data.select import select_rows
from healthbench.data.source import TaskSource
from healthbench.grading.gains import ordered, verdict
from healthbench.grading.settings import GradingPlan
from healthbench.grading.strategies import STRATEGIES
from healthbench.grading.transforms import TRANSFORMS, Transform
from healthbench.reporting.probe import write_probe_page
from healthbench.runs.attack import rewrites, rewritten_texts, strategy_transform
from healthbench.runs.estimate import REPLY_TOKENS, Unit
from healthbench.runs.folder import PROBE, PROBE_PAGE
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.probe import probe_jobs, probe_start
from healthbench.runs.records import ProbeRecord
from healthbench.runs.runner import Job
from healthbench.runs.session import BatchChoice
from healthbench.runs.spec import DataSpec, Limit, run_spec

# A model's reply is not known before it is sampled: the dry run rewrites one of the estimate's typical length.
_TYPICAL_REPLY = "x" * (REPLY_TOKENS * 4)


def _list(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    for name, transform in TRANSFORMS.items():
        click.echo(f"{name}: {transform.summary}\n    {transform.source}")
    for name, strategy in STRATEGIES.items():
        click.echo(f"{name} (an attacker's strategy, with --attacker): {strategy.summary}\n    {strategy.source}")
    ctx.exit()


def _unit(job: Job) -> Unit:
    """What the dry run counts for one job: a base job of a model asks it once, a transform asks nothing more (an
    attacker's rewrite is taken as long as the reply it rewrites)."""
    criteria = [item.criterion for item in job.row.rubrics]
    if job.transform is None:
        return Unit(job.row.prompt, job.reply, criteria)
    reply = _TYPICAL_REPLY if job.reply is None else job.reply
    if job.transform.name in STRATEGIES:
        return Unit(job.row.prompt, reply, criteria)
    return Unit(job.row.prompt, job.transform.apply(reply, job.row), criteria)


def _attacked(
    rows: Sequence[Row],
    replies: Mapping[str, str],
    strategies: Sequence[str],
    attacker: PolicyConfig,
    run: RunFlags,
    data: DataSpec,
) -> dict[str, Transform]:
    """Every reply rewritten by every strategy, made (or reused) in OUT/attacker/; the strategies as transforms. A
    rewrite the attacker did not make stops the probe: its gains would be of fewer tasks than the others'."""
    jobs = rewrites([(row.prompt_id, "", row.prompt, replies[row.prompt_id]) for row in rows], strategies)
    folder, failure = run_attack(jobs, attacker, run.out, data, run)
    texts = rewritten_texts(folder) if folder.path.is_dir() else {}
    missing = sum(1 for job in jobs if job.key not in texts)
    if failure is not None or missing:
        raise click.ClickException(
            f"the attacker's rewrites are not all made ({missing} of {len(jobs)} missing), so no reply is graded yet; "
            f"everything made is kept in {folder.path}: run the same command again to finish them"
        )
    return {name: strategy_transform(name, texts) for name in strategies}


# The sampling flags that mean nothing without --model, by their parameter names.
_MODEL_ONLY = (
    "system_message",
    "temperature",
    "max_tokens",
    "reasoning",
    "reasoning_effort",
    "policy_concurrency",
    "rpm",
    "tpm",
    "timeout",
)


@click.command()
@click.option(
    "--list",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_list,
    help="List the transforms, what each does and where its attack was published, and exit.",
)
@data_options
@click.option(
    "--responses",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='JSONL of {"prompt_id": ..., "response": ...}, as grade takes it (or --model).',
)
@click.option("--strict", is_flag=True, help="Refuse replies that name a task outside the data.")
@click.option("--model", help="Sample the replies from this model, as eval does (or --responses).")
@click.option(
    "--base-url", help="Its OpenAI-compatible endpoint [default: $OPENAI_BASE_URL or OpenAI]; key $OPENAI_API_KEY."
)
@sampling_options
@click.option("--limit", type=bounded(Limit), help="Probe N tasks, chosen as the reference does.")
@click.option(
    "--transform",
    "names",
    multiple=True,
    type=click.Choice([*TRANSFORMS, *STRATEGIES]),
    help="Try this transform (repeatable); an attacker's strategy needs --attacker [default: every transform of "
    "--list, and with --attacker every strategy].",
)
@attacker_option
@run_options
@length_options
@grading_command
def probe(
    tasks: TaskSource,
    responses: Path | None,
    strict: bool,
    model: str | None,
    base_url: str | None,
    policy_batch: bool,
    limit: int | None,
    names: tuple[str, ...],
    attacker: str | None,
    run: RunFlags,
    plan: GradingPlan,
    batch: BatchChoice | None,
    **flags: Any,
) -> None:
    """Grade each task's reply as it is and rewritten by each transform (and, with --attacker, by each strategy an
    attacker model rewrites it by), and say what each trick gains in task score (mean, 95% interval, share of
    tasks); writes probe.json, results.jsonl and probe.html."""
    if (responses is None) == (model is None):
        raise click.UsageError("give exactly one of --responses FILE or --model NAME")
    if model is None:
        given = [name for name in _MODEL_ONLY if flags[name] is not None] + (["policy_batch"] if policy_batch else [])
        if given:
            raise click.UsageError(f"--{given[0].replace('_', '-')} goes with --model")
    if policy_batch:
        if batch is None:
            raise click.UsageError("--policy-batch needs --batch")
        batch = dataclasses.replace(batch, policy=True)
    rows, data = read_tasks(tasks)
    replies = None
    if responses is not None:
        rows, replies = replied_rows(rows, responses, strict, limit)
    said_limit(limit, len(rows), "tasks with a reply" if replies is not None else "tasks in the data")
    rows = select_rows(rows, limit)
    grader = plan.grader
    policy = None if model is None else policy_from_flags(model, base_url, grader, **flags)
    attacking = attacker_from_flag(attacker, grader)
    transforms = chosen_tricks(names, attacking, "--transform")  # one named twice counts once
    strategies = [name for name in transforms if name in STRATEGIES]
    if run.dry_run:
        same = {name: Transform(name, lambda reply, row: reply) for name in strategies}
        jobs = probe_jobs(rows, replies, transforms, same)
        print_estimate([_unit(job) for job in jobs], grader, run.prices, run.dry_run, policy, tasks=len(rows))
        if attacking is not None and strategies:
            shown = replies or {row.prompt_id: _TYPICAL_REPLY for row in rows}
            planned = rewrites([(row.prompt_id, "", row.prompt, shown[row.prompt_id]) for row in rows], strategies)
            print_attack_estimate(planned, attacking, run.prices)
        return
    spec = run_spec(
        "probe",
        plan,
        data,
        seed=run.seed,
        limit=limit,
        responses=None if responses is None else str(responses),
        policy=policy,
        transforms=transforms,
        attacker=attacking if strategies else None,
    )
    attacked = None
    if attacking is not None and strategies:
        sampled = replies
        if sampled is None:
            click.echo("healthbench: sampling the model's replies first, for the attacker to rewrite", err=True)
            base = execute(
                probe_jobs(rows, None, []),
                run,
                spec,
                grader,
                policy=policy,
                batch=batch,
                html=False,
                headline=lambda metrics: (
                    f"the model's {len(rows)} replies sampled and graded as they are "
                    f"(base score {metrics['overall_score']:.4f}); the attacker rewrites them next"
                ),
            )
            sampled = {record.prompt_id: record.response or "" for record in base.read_results()}
        attacked = _attacked(rows, sampled, strategies, attacking, run, data)
    jobs = probe_jobs(rows, replies, transforms, attacked)

    def headline(metrics: dict[str, float | int]) -> str:
        return (
            f"base score {metrics['overall_score']:.4f} over {len(rows)} tasks, each graded as it is and "
            f"rewritten by {len(transforms)} transforms ({len(jobs)} samples)"
        )

    folder = execute(
        jobs,
        run,
        spec,
        grader,
        policy=policy,
        batch=batch,
        start=probe_start,
        page=write_probe_page,
        headline=headline,
    )
    summary = folder.read(ProbeRecord)
    if summary is not None:
        for name, gain in ordered(summary.gains()):
            click.echo(verdict(name, gain))
        click.echo(f"gains in {folder / PROBE}, chart and examples in {folder / PROBE_PAGE}")
