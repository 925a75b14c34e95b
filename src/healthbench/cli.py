"""The `healthbench` command line."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from pydantic import ValidationError

from .baselines import GROUP_DESCRIPTIONS, baseline_jobs
from .batchapi import BatchSettings
from .client import RequestFailed
from .config import DEFAULT_CONCURRENCY, GraderConfig
from .data import DataError, MetaRow, Row, load_meta_rows, load_rows
from .grading import Grader
from .metaeval import MODEL_F1, PHYSICIAN_F1, grade_meta_rows, write_meta_metrics
from .pricing import CostMeter, Unit, estimate, estimate_report, load_prices
from .report import write_meta_report, write_report
from .runner import RUN, Job, RunOutcome, aggregate_records, load_responses, select_rows, write_json_atomic
from .sampling import Policy, PolicyConfig
from .session import BatchChoice, execute, run_session
from .store import STORE, ConfigMismatch, Store

F = TypeVar("F", bound=Callable[..., Any])


def _options(*options: Callable[[F], F]) -> Callable[[F], F]:
    def apply(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return apply


data_options = _options(
    click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="JSONL file."),
    click.option("--subset", type=click.Choice(["full", "hard", "consensus"]), help="Official subset."),
)

grader_options = _options(
    click.option("--grader-model", help="Grader model [default: $HEALTHBENCH_GRADER_MODEL or gpt-4.1-2025-04-14]."),
    click.option("--grader-base-url", help="Grader endpoint [default: $HEALTHBENCH_GRADER_BASE_URL or OpenAI]."),
    click.option(
        "--concurrency",
        type=click.IntRange(min=1),
        default=DEFAULT_CONCURRENCY,
        show_default=True,
        help="Grader calls in flight at once, one budget for the whole process.",
    ),
    click.option(
        "--max-attempts",
        type=click.IntRange(min=1),
        default=12,
        show_default=True,
        help="Attempts per call before the sample fails.",
    ),
)

batch_options = _options(
    click.option(
        "--batch",
        is_flag=True,
        help="Grade through the OpenAI Batch API: half price, results within 24 hours. Killed or closed while "
        "waiting, the same command re-attaches to the batches it submitted.",
    ),
    click.option(
        "--poll-interval",
        type=click.FloatRange(min=0.01),
        default=30.0,
        show_default=True,
        help="Seconds between batch status checks.",
    ),
    click.option(
        "--batch-tokens",
        type=click.IntRange(min=1),
        help="With --batch: most tokens queued in batches at once (your organization's batch queue limit for "
        "the model) [default: found from refused batches].",
    ),
    click.option(
        "--no-wait",
        is_flag=True,
        help="With --batch: submit, collect what is finished, and exit; the same command later goes on.",
    ),
)

run_options = _options(
    click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder."),
    click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed."),
    click.option("--prices", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Price table JSON."),
    click.option("--progress/--no-progress", default=True, help="Show a progress bar on a terminal."),
    click.option(
        "--dry-run", is_flag=True, help="Print the calls, tokens and cost (live and batch) of this run, and stop."
    ),
)


def _load_tasks(data: Path | None, subset: str | None) -> tuple[list[Row], str]:
    """The rows, and the sha256 of the file they came from (a run's identity includes its data)."""
    from .subsets import file_sha256, subset_path  # deferred: the download machinery is not needed for --data

    if (data is None) == (subset is None):
        raise click.UsageError("give exactly one of --data PATH or --subset NAME")
    if data is None:
        from .subsets import load_subset

        rows = load_subset(subset or "full")
        return rows, file_sha256(subset_path(subset or "full"))
    return load_rows(data), file_sha256(data)


def _grader_config(model: str | None, base_url: str | None, concurrency: int, max_attempts: int) -> GraderConfig:
    """The grader settings from the shared flags, falling back to the grader's own environment variables."""
    return GraderConfig.from_env(model=model, base_url=base_url, concurrency=concurrency, max_attempts=max_attempts)


def _user_errors(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (DataError, ConfigMismatch) as exc:
            raise click.ClickException(str(exc)) from None
        except ValidationError as exc:
            raise click.UsageError("; ".join(e["msg"] for e in exc.errors(include_url=False))) from None

    return wrapper  # type: ignore[return-value]


def _batch_choice(batch: bool, poll_interval: float, tokens: int | None, no_wait: bool) -> BatchChoice | None:
    for flag, given in (("--batch-tokens", tokens is not None), ("--no-wait", no_wait)):
        if given and not batch:
            raise click.UsageError(f"{flag} needs --batch")
    settings = BatchSettings(poll_interval=poll_interval, wait=not no_wait, max_tokens=tokens)
    return BatchChoice(settings) if batch else None


def _grading(func: F) -> F:
    """Add the grader and batch flags to a grading command, and hand them to it made into `grader` (the
    settings) and `batch` (None for live grading)."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        grader_model: str | None,
        grader_base_url: str | None,
        concurrency: int,
        max_attempts: int,
        batch: bool,
        poll_interval: float,
        batch_tokens: int | None,
        no_wait: bool,
        **kwargs: Any,
    ) -> Any:
        grader = _grader_config(grader_model, grader_base_url, concurrency, max_attempts)
        choice = _batch_choice(batch, poll_interval, batch_tokens, no_wait)
        return func(*args, grader=grader, batch=choice, **kwargs)

    return cast(F, grader_options(batch_options(wrapper)))


@click.group()
@click.version_option(package_name="healthbench")
def main() -> None:
    """HealthBench: grade health conversations against physician rubrics, as OpenAI's reference does."""


@main.command()
@click.argument("names", nargs=-1, type=click.Choice(["full", "hard", "consensus", "meta"]))
@_user_errors
def download(names: tuple[str, ...]) -> None:
    """Download and check official files (all of them when no name is given)."""
    from .subsets import SUBSETS, subset_path

    for name in names or tuple(SUBSETS):
        click.echo(f"{name}: {subset_path(name)}")


@main.command()
@data_options
@click.option(
    "--responses",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='JSONL of {"prompt_id": ..., "response": ...}.',
)
@run_options
@click.option("--report", is_flag=True, help="Also write report.html (healthbench report DIR does it later).")
@_user_errors
@_grading
def grade(
    data: Path | None,
    subset: str | None,
    responses: Path,
    report: bool,
    out: Path,
    seed: int,
    prices: Path | None,
    progress: bool,
    dry_run: bool,
    grader: GraderConfig,
    batch: BatchChoice | None,
) -> None:
    """Grade fixed replies; results.jsonl grows as samples finish, then metrics.json is written."""
    rows, _ = _load_tasks(data, subset)
    replies = load_responses(responses, {row.prompt_id for row in rows})
    jobs = [Job(row, 0, replies[row.prompt_id]) for row in rows if row.prompt_id in replies]
    if dry_run:
        _print_estimate([_unit(job) for job in jobs], grader, prices)
        return
    identity = {"command": "grade"} | grader.identity()
    extra = {"responses": str(responses)}
    execute(
        jobs, out, grader, identity, batch=batch, seed=seed, prices=prices, progress=progress, extra=extra, html=report
    )


@main.command(name="eval")
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
@click.option("--policy-batch", is_flag=True, help="With --batch, sample the model's replies in batches too.")
@run_options
@_user_errors
@_grading
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
    policy_batch: bool,
    out: Path,
    seed: int,
    prices: Path | None,
    progress: bool,
    dry_run: bool,
    grader: GraderConfig,
    batch: BatchChoice | None,
) -> None:
    """Sample replies from a model and grade them; run again on the same --out to resume."""
    if policy_batch:
        if batch is None:
            raise click.UsageError("--policy-batch needs --batch")
        batch = dataclasses.replace(batch, policy=True)
    all_rows, data_sha = _load_tasks(data, subset)
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
        max_attempts=grader.max_attempts,  # the one --max-attempts flag bounds both sides
    )
    jobs = [Job(row, repeat) for repeat in range(n_repeats) for row in rows]
    if dry_run:
        _print_estimate([_unit(job) for job in jobs], grader, prices, policy_config, tasks=len(rows))
        return
    identity = (
        {"command": "eval", "data_sha256": data_sha, "limit": limit, "n_repeats": n_repeats}
        | policy_config.identity()
        | grader.identity()
    )
    extra = {"data": str(data) if data else f"subset:{subset}", "base_url": policy_config.base_url}
    execute(
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
    )


def _unit(job: Job) -> Unit:
    return Unit(job.row.prompt, job.reply, [item.criterion for item in job.row.rubrics])


def _print_estimate(
    units: Sequence[Unit],
    grader: GraderConfig,
    prices: Path | None,
    policy: PolicyConfig | None = None,
    **counts: int,
) -> None:
    """The `--dry-run` answer, as JSON: nothing is sent and nothing is written."""
    guess = estimate(units, system_message=policy.system_message if policy else None)
    report = estimate_report(guess, load_prices(prices), grader.model, policy.model if policy else None)
    click.echo(json.dumps(counts | {"samples": len(units)} | report, indent=2))


@main.command()
@click.option(
    "--group",
    required=True,
    type=click.IntRange(1, 3),
    help="Physician group: 1 wrote without reference completions, 2 and 3 were shown four.",
)
@click.option("--references", is_flag=True, help="Grade the 4 reference completions the group was shown (2, 3).")
@data_options
@click.option("--limit", type=click.IntRange(min=1), help="Grade N samples, chosen as the reference does.")
@run_options
@_user_errors
@_grading
def baseline(
    group: int,
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
) -> None:
    """Grade the physicians' ideal completions of one group, or the reference completions they were shown."""
    if references and group == 1:
        raise click.UsageError(
            "--references: Group 1 physicians were shown no reference completions; use --group 2 or 3"
        )
    rows, data_sha = _load_tasks(data, subset)
    jobs = baseline_jobs(rows, group, references=references, limit=limit)
    identity = {
        "command": "baseline",
        "group": group,
        "references": references,
        "data_sha256": data_sha,
        "limit": limit,
    } | grader.identity()
    extra = {
        "data": str(data) if data else f"subset:{subset}",
        "completions": f"Group {group} {'reference' if references else 'physician ideal'} completions",
        "group_description": GROUP_DESCRIPTIONS[group],
    }
    if dry_run:
        _print_estimate([_unit(job) for job in jobs], grader, prices)
        return
    execute(jobs, out, grader, identity, batch=batch, seed=seed, prices=prices, progress=progress, extra=extra)


def _load_meta(data: Path | None, subset: str | None) -> tuple[list[MetaRow], str]:
    """The meta-eval rows (the official file unless --data) and the sha256 of their file."""
    from .subsets import file_sha256, load_meta_subset, subset_path  # deferred, as in _load_tasks

    if data is not None and subset is not None:
        raise click.UsageError("give at most one of --data PATH or --subset meta")
    if data is None:
        return load_meta_subset(), file_sha256(subset_path("meta"))
    return load_meta_rows(data), file_sha256(data)


def _meta_headline(metrics: dict[str, float | int]) -> str:
    model, physicians = metrics.get(MODEL_F1), metrics.get(PHYSICIAN_F1)
    grader = "undefined (the grader gave one verdict only)" if model is None else f"{model:.4f}"
    pooled = "undefined" if physicians is None else f"{physicians:.4f}"
    return f"grader macro F1 {grader} (physicians pooled: {pooled}) over {metrics['score:n_samples']} rows"


@main.command(name="meta-eval")
@click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Meta-eval JSONL file.")
@click.option("--subset", type=click.Choice(["meta"]), help="The official meta-eval file [default, unless --data].")
@click.option("--limit", type=click.IntRange(min=1), help="Grade N rows, chosen as the reference does.")
@run_options
@_user_errors
@_grading
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
        _print_estimate([Unit(row.prompt, row.completion, [row.rubric]) for row in rows], grader, prices)
        return
    identity = {"command": "meta-eval", "data_sha256": data_sha, "limit": limit} | grader.identity()

    def start(built: Grader, _policy: Policy | None, _store: Store, costs: CostMeter) -> Awaitable[RunOutcome]:
        return grade_meta_rows(rows, built, out, seed=seed, progress=progress, describe_cost=costs.progress)

    run_session(
        start,
        out,
        grader,
        identity,
        policy=None,
        batch=batch,
        seed=seed,
        prices=prices,
        extra={"data": str(data) if data else "subset:meta"},
        write=write_meta_report,
        headline=_meta_headline,
        units=(len(rows), "rows"),
    )


@main.command()
@click.argument("out", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--seed", type=int, help="Bootstrap seed [default: the run's].")
@_user_errors
def report(out: Path, seed: int | None) -> None:
    """Rebuild OUT/metrics.json and OUT/report.html from OUT/results.jsonl (of any run, meta-eval included)."""
    from .compare import load_results

    results = load_results(out)
    if not results:
        raise click.ClickException(f"{out / 'results.jsonl'}: no results")
    run_path = out / RUN
    run = json.loads(run_path.read_text(encoding="utf-8")) if run_path.exists() else {}
    failed = run.get("failed", 0)
    if failed:
        raise click.ClickException(
            f"{out}: {failed} samples of this run were not graded; finish the run before scoring it"
        )
    bootstrap_seed = run.get("seed", 0) if seed is None else seed
    if run.get("command") == "meta-eval":
        meta = write_meta_metrics(out, results, seed=bootstrap_seed)
        click.echo(f"{_meta_headline(meta)}; report in {write_meta_report(out)}")
        return
    metrics = aggregate_records(results, seed=bootstrap_seed)
    write_json_atomic(out / "metrics.json", metrics)
    click.echo(f"score {metrics['score']:.4f} ± {metrics['score:bootstrap_std']:.4f}; report in {write_report(out)}")


@main.command()
@click.argument("out", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--cancel",
    is_flag=True,
    help="Cancel every batch still running. Nothing more is spent; the same run command later collects what "
    "finished and sends the rest again.",
)
@click.option("--grader-base-url", help="Grader endpoint [default: the run's, else as for grading].")
@click.option("--base-url", help="The model's endpoint, for policy batches [default: the run's, else as for eval].")
@_user_errors
def batches(out: Path, cancel: bool, grader_base_url: str | None, base_url: str | None) -> None:
    """List the batches of the run in OUT not yet collected, with their status; --cancel stops them."""
    from .batchapi import batch_report

    if not (out / STORE).exists():
        raise click.ClickException(f"{out}: no run here ({STORE} is missing)")
    run_path = out / RUN
    run = json.loads(run_path.read_text(encoding="utf-8")) if run_path.exists() else {}
    grader = GraderConfig.from_env(base_url=grader_base_url or run.get("grader_base_url"))
    policy = PolicyConfig.from_env(base_url=base_url or run.get("base_url"), model=run.get("model", "unknown"))
    store = Store(out / STORE)
    try:
        records = store.open_batches()
    finally:
        store.close()
    if not records:
        click.echo(f"{out}: no batches out")
        return

    async def report() -> list[str]:
        chats = {"grader": grader.chat(), "policy": policy.chat()}
        try:
            return await batch_report(chats, records, cancel=cancel)
        finally:
            for chat in chats.values():
                await chat.aclose()

    try:
        lines = asyncio.run(report())
    except RequestFailed as exc:
        raise click.ClickException(f"could not reach the batches of {out}: {exc}") from None
    for line in lines:
        click.echo(line)


@main.command()
@click.argument("run_a", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--n-bootstrap", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def compare(run_a: Path, run_b: Path, seed: int, n_bootstrap: int, as_json: bool) -> None:
    """Paired per-task difference RUN_B - RUN_A, with a bootstrap interval, overall and per theme and axis."""
    from .compare import compare_runs, format_comparison, load_results

    result = compare_runs(load_results(run_a), load_results(run_b), seed=seed, n_bootstrap=n_bootstrap)
    click.echo(json.dumps(result, indent=2) if as_json else format_comparison(result))


@main.command()
@click.option(
    "--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="JSONL file: the test split."
)
@click.option(
    "--subset",
    "subsets",
    multiple=True,
    type=click.Choice(["full", "hard", "consensus"]),
    help="Official subset, repeatable: full is the test split, hard and consensus are splits of their own "
    "[default: full, unless --data].",
)
@click.option("--host", default="0.0.0.0", show_default=True, help="Interface to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8080, show_default=True, envvar="PORT", help="[env: PORT]"
)
@grader_options
@_user_errors
def serve(
    data: Path | None,
    subsets: tuple[str, ...],
    host: str,
    port: int,
    grader_model: str | None,
    grader_base_url: str | None,
    concurrency: int,
    max_attempts: int,
) -> None:
    """Serve HealthBench as an OpenReward environment; sessions send the grader key as secret OPENAI_API_KEY."""
    from .environment import load_splits  # the OpenReward SDK is imported by this command only
    from .environment import serve as serve_environment

    try:
        splits = load_splits(data, subsets)
    except DataError:
        raise
    except ValueError as exc:  # --data together with --subset full
        raise click.UsageError(str(exc)) from None
    config = _grader_config(grader_model, grader_base_url, concurrency, max_attempts)
    serve_environment(splits, host=host, port=port, grader=config)
