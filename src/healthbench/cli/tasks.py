"""The flags that choose a command's tasks (`--data`, `--subset`), and the rows read from them, with what is
said on stderr about them."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import click

from healthbench.cli.options import F, options
from healthbench.cli.render import download_bar
from healthbench.data.schema import Row
from healthbench.data.source import TaskSource
from healthbench.data.subsets import TASK_SUBSETS
from healthbench.errors import DownloadFailed

data_options = options(
    click.option(
        "--data",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="JSONL file, in HealthBench's schema or Professional's (told from its first row; a Professional file "
        "is graded as --subset professional is).",
    ),
    click.option(
        "--subset",
        type=click.Choice(TASK_SUBSETS),
        help="Official subset; professional defaults to its official grader and length adjustment.",
    ),
)


@contextmanager
def data_flag_offered() -> Iterator[None]:
    """A failed download, said with the way to work offline that a command taking --data has besides
    HEALTHBENCH_DATA_DIR."""
    try:
        yield
    except DownloadFailed as exc:
        raise exc.offering("pass --data PATH") from None


def load_tasks(tasks: TaskSource) -> tuple[list[Row], str]:
    """The rows, and the sha256 of the file they came from (a run's identity includes its data)."""
    with data_flag_offered():
        return tasks.rows(download_bar), tasks.sha256()


def said_limit(limit: int | None, available: int, what: str) -> None:
    """Say on stderr, in one line, when `--limit` asks for more than there is: all of it is run."""
    if limit is not None and limit > available:
        said = f"healthbench: --limit {limit} is more than the {available} {what}; running all {available}"
        click.echo(said, err=True)


def professional_note(tasks: TaskSource) -> None:
    """Say on stderr when a --data file is recognised as HealthBench Professional's, and so graded as one."""
    if tasks.professional_file:
        click.echo(
            f"healthbench: {tasks.path} is in HealthBench Professional's schema, so it is graded as --subset "
            "professional is (its official grader and length adjustment, unless flags say otherwise)",
            err=True,
        )


def graded_tasks(func: F) -> F:
    """Hand a command's --data and --subset (exactly one given) to it as `tasks`, a `TaskSource`; it goes below
    `user_errors` and above `grading`, which builds the grader for the tasks' kind."""

    @functools.wraps(func)
    def wrapper(*args: Any, data: Path | None, subset: str | None, **kwargs: Any) -> Any:
        if (data is None) == (subset is None):
            raise click.UsageError("give exactly one of --data PATH or --subset NAME")
        tasks = TaskSource.file(data) if data is not None else TaskSource.named(subset or "full")
        professional_note(tasks)
        return func(*args, tasks=tasks, **kwargs)

    return cast(F, wrapper)
