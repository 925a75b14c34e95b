"""The flags that choose a command's tasks (`--data`, `--subset`, and a training split of them: `--split`,
`--heldout`, `--split-seed`), and the rows read from them, with what is said on stderr about them."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import click

from healthbench.cli.bounds import bounded
from healthbench.cli.options import F, options
from healthbench.cli.render import download_bar
from healthbench.data.schema import Row
from healthbench.data.source import TaskSource
from healthbench.data.splits import SPLITS
from healthbench.data.subsets import TASK_SUBSETS
from healthbench.errors import DownloadFailed
from healthbench.grading.bootstrap import Seed
from healthbench.runs.spec import DataSpec

HELDOUT_HELP = (
    "With --data: a JSONL file whose rows (by prompt_id) form the heldout split, such as the official hard file "
    "[default: a seeded, theme-stratified 20%]."
)
split_options = options(
    click.option(
        "--heldout",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help=HELDOUT_HELP,
    ),
    click.option(
        "--split-seed",
        type=bounded(Seed),
        default=0,
        show_default=True,
        help="The seed of the split's seeded choices (validation; heldout too when --data has no --heldout).",
    ),
)

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
    click.option(
        "--split",
        type=click.Choice(SPLITS),
        help="Only this training split of the full set or --data: heldout is HealthBench Hard for the full set; "
        "report a model trained here on heldout (docs/training.md).",
    ),
    split_options,
)


@contextmanager
def data_flag_offered() -> Iterator[None]:
    """A failed download, said with the way to work offline that a command taking --data has besides
    HEALTHBENCH_DATA_DIR."""
    try:
        yield
    except DownloadFailed as exc:
        raise exc.offering("pass --data PATH") from None


def read_tasks(tasks: TaskSource) -> tuple[list[Row], DataSpec]:
    """The rows (of the split, when one is chosen), and the data's spec: the sha256 of the file they came from (a
    run's identity includes its data) and the split with what decided it."""
    with data_flag_offered():
        rows = tasks.rows(download_bar)
        data = DataSpec(source=tasks.name, sha256=tasks.sha256())
        if tasks.split is None:
            return rows, data
        held = tasks.heldout_sha256()
    click.echo(f"healthbench: the {tasks.split} split of {tasks.name}: {len(rows):,} tasks", err=True)
    split = {"split": tasks.split, "split_seed": tasks.split_seed, "heldout": tasks.heldout_name}
    return rows, data.model_copy(update=split | {"heldout_sha256": held})


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


def chosen_tasks(
    data: Path | None, subset: str | None, split: str | None, heldout: Path | None, split_seed: int
) -> TaskSource:
    """The tasks --data or --subset (exactly one given) and the split flags choose, as `TaskSource.chosen` reads
    them; its `SettingsError` (a split of data that is not split, --heldout without --split) is said in flags."""
    if (data is None) == (subset is None):
        raise click.UsageError("give exactly one of --data PATH or --subset NAME")
    return TaskSource.chosen(data, subset, split=split, heldout=heldout, seed=split_seed)


def graded_tasks(func: F) -> F:
    """Hand a command's --data and --subset (exactly one given) and its split flags to it as `tasks`, a
    `TaskSource`; it goes below `user_errors` and above `grading`, which builds the grader for the tasks' kind."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        data: Path | None,
        subset: str | None,
        split: str | None,
        heldout: Path | None,
        split_seed: int,
        **kwargs: Any,
    ) -> Any:
        tasks = chosen_tasks(data, subset, split, heldout, split_seed)
        professional_note(tasks)
        return func(*args, tasks=tasks, **kwargs)

    return cast(F, wrapper)
