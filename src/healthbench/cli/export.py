"""`healthbench export`: a training split's tasks in TRL's, verl's or OpenRLHF's dataset format (docs/training.md)."""

from __future__ import annotations

from pathlib import Path

import click

from healthbench.cli.bounds import bounded
from healthbench.cli.failures import user_errors
from healthbench.cli.render import download_bar
from healthbench.cli.tasks import HELDOUT_HELP, data_flag_offered
from healthbench.data.source import TaskSource
from healthbench.data.splits import SPLITS, SplitName
from healthbench.data.subsets import TASK_SUBSETS
from healthbench.grading.bootstrap import Seed
from healthbench.integrations.export import FORMATS, export_splits
from healthbench.runs.exports import MANIFEST


@click.command()
@click.option("--format", "form", required=True, type=click.Choice(FORMATS), help="The trainer's dataset format.")
@click.option(
    "--split",
    "splits",
    required=True,
    multiple=True,
    type=click.Choice(SPLITS),
    help="A split to write, repeatable: train to train on, validation to choose checkpoints on; heldout is what a "
    "model trained on train is reported on.",
)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder.")
@click.option(
    "--data",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSONL file of tasks to split [default: the full set, whose heldout is HealthBench Hard].",
)
@click.option("--subset", type=click.Choice(TASK_SUBSETS), help="Official subset (only full is split).")
@click.option("--heldout", type=click.Path(exists=True, dir_okay=False, path_type=Path), help=HELDOUT_HELP)
@click.option(
    "--seed",
    "split_seed",
    type=bounded(Seed),
    default=0,
    show_default=True,
    help="The split's seed (its seeded choices: validation, and heldout when --data has no --heldout).",
)
@user_errors
def export(
    form: str,
    splits: tuple[SplitName, ...],
    out: Path,
    data: Path | None,
    subset: str | None,
    heldout: Path | None,
    split_seed: int,
) -> None:
    """Write the tasks of each --split for a trainer: TRL (JSONL: prompt, prompt_id), verl (parquet: data_source,
    prompt, ability, reward_model, extra_info) or OpenRLHF (JSONL: prompt, label). Every row has its prompt_id,
    none its rubric; the same command writes the same bytes.

    A manifest beside the files (.healthbench-export.json) names the data, the heldout rows and the seed: a later
    export into the same --out must split the same way, or it is refused naming the difference (so no task is in
    one file's train and another's heldout)."""
    tasks = TaskSource.chosen(data, subset).splitting(None, heldout, split_seed)
    if not tasks.splittable:
        raise click.UsageError(f"--split splits the full set or a --data file, not the {subset} subset")
    with data_flag_offered():
        rows = tasks.all_rows(download_bar)
        parts = tasks.splits(rows, download_bar)
        written = export_splits(parts, splits, form, out, tasks, download_bar)
    for split, path in written.items():
        click.echo(f"{split}: {len(parts[split])} tasks -> {path}")
    click.echo(f"manifest (data, heldout, seed, files) -> {out / MANIFEST}")
