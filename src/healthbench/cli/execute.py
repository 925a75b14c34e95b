"""How a grading command runs: the wrappers that make its arguments, its dry run, and its jobs in a session, with
what it says when the session is over."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import click

from healthbench.cli.failures import user_errors
from healthbench.cli.options import DryRun, F, RunFlags, grading
from healthbench.cli.render import Bar, finish
from healthbench.cli.tasks import graded_tasks
from healthbench.grading.settings import GraderConfig
from healthbench.reporting.report import write_report
from healthbench.runs.estimate import Unit, dry_run
from healthbench.runs.folder import RunFolder
from healthbench.runs.outputs import DryRunEstimate, GraderEstimate, KeyPace, SideEstimate
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.pricing import load_prices
from healthbench.runs.runner import Job
from healthbench.runs.session import BatchChoice, Start, jobs_start, run_session
from healthbench.runs.spec import RunSpec


def grading_command(func: F) -> F:
    """The wrappers of a command that grades tasks, in the order they need: `user_errors` outermost, so that what
    the others raise is one line, then `graded_tasks`, whose `tasks` `grading` reads for the official defaults of
    their kind."""
    return user_errors(graded_tasks(grading(func)))


def unit(job: Job, times: int = 1) -> Unit:
    """The dry run's unit of `job`, standing for `times` samples alike (its task's repeats)."""
    return Unit(job.row.prompt, job.reply, [item.criterion for item in job.row.rubrics], times)


def print_estimate(
    units: Sequence[Unit],
    grader: GraderConfig,
    prices: Path | None,
    form: DryRun,
    policy: PolicyConfig | None = None,
    tasks: int | None = None,
) -> None:
    """The `--dry-run` answer, as a summary or as JSON (`form`): nothing is sent and nothing is written."""
    estimate = dry_run(units, grader, load_prices(prices), policy, tasks=tasks)
    click.echo(estimate.model_dump_json(indent=2) if form == "json" else "\n".join(estimate_lines(estimate)))


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} min"


def _cost(usd: float | None) -> str:
    return "no price known" if usd is None else f"${usd:,.2f}"


# The flags that give a key's limits, by the sides that use the key.
_LIMIT_FLAGS = {"grader": "--grader-rpm/--grader-tpm", "policy": "--rpm/--tpm"}


def _pace(name: str, key: KeyPace) -> str:
    """One key's line of the wall time: its endpoint, its time and the limits it was reckoned at."""
    where = f"  {name} key at {key.base_url}: "
    if key.seconds is None:
        flags = " or ".join(_LIMIT_FLAGS[side] for side in name.split("+"))
        return f"{where}no rate limit known, so none assumed (give {flags})"
    limits = " and ".join(f"{value:,g} {unit}" for unit, value in (("RPM", key.rpm), ("TPM", key.tpm)) if value)
    source = "given" if key.limits == "given" else key.limits.removeprefix("default: ") + ", assumed"
    return f"{where}{_duration(key.seconds)} at {limits} ({source}), {key.binding}-bound"


def _grader_notes(grader: GraderEstimate) -> list[str]:
    """The dry run's lines on how the grader is called and the prompt cache hit rate it assumes."""
    notes = []
    if grader.grader_calls == "per-reply":
        notes.append("    one call per reply for all its items (--grader-calls per-reply): not the official grading")
    cache = grader.prompt_cache
    if cache is not None and cache.prompt_cache_key:
        saved = "" if cache.saved_usd is None else f", ${cache.saved_usd:,.2f} off the live cost"
        rate = f"{100 * cache.assumed_hit_rate:.0f}%"
        notes.append(f"    prompt cache: {rate} of prompt tokens assumed cached{saved}: {cache.rule}")
    elif cache is not None:
        notes.append("    prompt cache: no hit assumed (--no-prompt-cache-key: no prompt_cache_key is sent)")
    return notes


def side_line(side: str, usage: SideEstimate) -> str:
    """A dry run's line of one side (policy, grader, attacker): its model and endpoint, calls, tokens and cost."""
    reasoning = usage.reasoning_tokens
    thinking = f", {reasoning:,} of them reasoning" if reasoning else ""
    return (
        f"  {side} {usage.model} at {usage.base_url}: {usage.calls:,} calls, "
        f"{usage.prompt_tokens:,} prompt and {usage.completion_tokens:,} output tokens{thinking}; "
        f"{_cost(usage.cost_usd)} live, {_cost(usage.batch_cost_usd)} batch"
    )


def estimate_lines(estimate: DryRunEstimate) -> list[str]:
    """The `--dry-run` summary: the samples, each side's calls, tokens, cost and endpoint, the total cost, and
    the least wall time with the limits it assumes."""
    tasks = f" of {estimate.tasks} tasks" if estimate.tasks is not None else ""
    lines = [f"dry run (nothing sent, nothing written): {estimate.samples:,} samples{tasks}"]
    for side, usage in (("policy", estimate.policy), ("grader", estimate.grader)):
        if usage is not None:
            lines.append(side_line(side, usage))
    lines += _grader_notes(estimate.grader)
    total = estimate.total_cost_usd
    lines.append(f"  total {_cost(total.live)} live, {_cost(total.batch)} batch")
    wall = estimate.wall_time
    if wall.seconds is None:
        lines.append("least wall time unknown:")
    else:
        slowest = " (the slowest key's)" if len(wall.keys) > 1 else ""
        lines.append(f"least wall time {_duration(wall.seconds)}{slowest}:")
    lines += [_pace(name, key) for name, key in wall.keys.items()]
    lines.append("(--json prints these figures as JSON)")
    return lines


def execute(
    jobs: Sequence[Job],
    run: RunFlags,
    spec: RunSpec,
    grader: GraderConfig,
    *,
    policy: PolicyConfig | None = None,
    batch: BatchChoice | None,
    html: bool = True,
    start: Callable[..., Start] = jobs_start,
    page: Callable[[Path], Path] = write_report,
    headline: Callable[[dict[str, float | int]], str] | None = None,
) -> RunFolder:
    """Run the jobs of `spec` in `run.out`, with `run`'s price table and progress bar, as `start` builds the run
    and say how it went in `headline` (exit 1 on failures); with `html`, write its `page` too. The folder is
    returned for what a command says after."""
    for config in (grader, policy):
        if config is not None:
            config.check_pace_store()  # a shared pace out of reach stops the run before anything is sent
    folder = RunFolder(run.out)
    result = run_session(
        start(jobs, folder, spec, sample_first=batch is not None),
        folder,
        spec,
        grader,
        samples=len(jobs),
        policy=policy,
        batch=batch,
        prices=run.prices,
        progress=Bar(run.progress),
        report=page if html else None,
    )
    kind = "score" if spec.length_adjustment is None else "length-adjusted score"

    def score(metrics: dict[str, float | int]) -> str:
        std, n = metrics["score:bootstrap_std"], metrics["score:n_samples"]
        return f"{kind} {metrics['score']:.4f} ± {std:.4f} over {n} samples"

    finish(result, headline or score, "samples")
    return folder
