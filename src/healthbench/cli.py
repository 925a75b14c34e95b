"""The `healthbench` command line."""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .config import DEFAULT_CONCURRENCY, GraderConfig
from .data import DataError, Row, load_rows
from .runner import RUN, grade_responses, load_responses, write_json_atomic
from .subsets import SUBSETS, load_subset, subset_path

F = TypeVar("F", bound=Callable[..., Any])


def data_options(func: F) -> F:
    """`--data PATH | --subset NAME`."""
    func = click.option("--subset", type=click.Choice(["full", "hard", "consensus"]), help="Official subset.")(func)
    return click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="JSONL file.")(
        func
    )


def grader_options(func: F) -> F:
    """The grader's own settings, shared by every command that grades."""
    options = [
        click.option(
            "--grader-model", help="Grader model [default: gpt-4.1-2025-04-14, or $HEALTHBENCH_GRADER_MODEL]."
        ),
        click.option(
            "--grader-base-url",
            help="OpenAI-compatible endpoint for the grader [default: $HEALTHBENCH_GRADER_BASE_URL or OpenAI].",
        ),
        click.option(
            "--concurrency",
            type=click.IntRange(min=1),
            default=DEFAULT_CONCURRENCY,
            show_default=True,
            help="Grader calls in flight at once, shared by all tasks.",
        ),
        click.option(
            "--max-attempts",
            type=click.IntRange(min=1),
            default=12,
            show_default=True,
            help="Attempts per grader call before the task fails.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _load_tasks(data: Path | None, subset: str | None) -> list[Row]:
    if (data is None) == (subset is None):
        raise click.UsageError("give exactly one of --data PATH or --subset NAME")
    return load_rows(data) if data is not None else load_subset(subset or "full")


def _data_errors(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except DataError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper  # type: ignore[return-value]


@click.group()
@click.version_option(package_name="healthbench")
def main() -> None:
    """HealthBench: grade health conversations against physician rubrics, as OpenAI's reference does."""


@main.command()
@click.argument("names", nargs=-1, type=click.Choice(list(SUBSETS)))
@_data_errors
def download(names: tuple[str, ...]) -> None:
    """Download and check official files (all of them when no name is given)."""
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
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder.")
@grader_options
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar on a terminal.")
@_data_errors
def grade(
    data: Path | None,
    subset: str | None,
    responses: Path,
    out: Path,
    grader_model: str | None,
    grader_base_url: str | None,
    concurrency: int,
    max_attempts: int,
    seed: int,
    progress: bool,
) -> None:
    """Grade fixed replies: writes OUT/results.jsonl as tasks finish, then OUT/metrics.json."""
    rows = _load_tasks(data, subset)
    replies = load_responses(responses, {row.prompt_id for row in rows})
    config = GraderConfig.from_env(
        model=grader_model, base_url=grader_base_url, concurrency=concurrency, max_attempts=max_attempts
    )
    grader = config.build()

    async def run() -> Any:
        try:
            return await grade_responses(rows, replies, grader, out, seed=seed, progress=progress)
        finally:
            await grader.client.aclose()

    started = time.time()
    outcome = asyncio.run(run())
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        out / RUN,
        {
            **config.describe(),
            "data": str(data) if data else f"subset:{subset}",
            "seed": seed,
            "tasks": len(replies),
            "graded_now": outcome.graded,
            "reused": outcome.reused,
            "failed": len(outcome.failures),
            "usage": outcome.usage.as_dict(),
            "seconds": round(time.time() - started, 3),
        },
    )
    for failure in outcome.failures:
        click.echo(f"healthbench: not graded: {failure}", err=True)
    if outcome.metrics is None:
        click.echo(
            f"healthbench: {len(outcome.failures)} of {len(replies)} tasks could not be graded; "
            f"no score written. Graded tasks are kept in {out / 'results.jsonl'}; run again to retry the rest.",
            err=True,
        )
        sys.exit(1)
    click.echo(
        f"score {outcome.metrics['score']:.4f} ± {outcome.metrics['score:bootstrap_std']:.4f} "
        f"over {outcome.metrics['score:n_samples']} tasks ({outcome.graded} graded now, {outcome.reused} reused); "
        f"{outcome.usage.calls} grader calls; metrics in {out / 'metrics.json'}"
    )
