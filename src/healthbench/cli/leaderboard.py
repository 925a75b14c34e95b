"""`healthbench leaderboard`: finished runs side by side, as a page and a Markdown table (or JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from healthbench.cli.failures import user_errors
from healthbench.cli.options import NamedPath
from healthbench.runs.lock import refuse_if_written


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--out",
    type=NamedPath(dir_okay=False, path_type=Path),
    default=Path("leaderboard.html"),
    show_default=True,
    help="The HTML page to write.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON instead of the Markdown table (the page is still written)."
)
@user_errors
def leaderboard(runs: tuple[Path, ...], out: Path, as_json: bool) -> None:
    """Rank finished runs by headline score (equal scores share a rank), with 95% intervals, per theme and axis
    (per slice for Professional), marking runs graded or configured unlike the others; meta-eval runs are
    refused. The subset column names the official subset, or the data file and the start of its sha256."""
    from healthbench.reporting.leaderboard import build
    from healthbench.reporting.leaderboard_page import format_markdown, write_page

    for run in runs:
        refuse_if_written(run)
    board = build(runs)
    page = write_page(board, out)
    click.echo(json.dumps(board | {"page": str(page)}, indent=2) if as_json else format_markdown(board), nl=as_json)
    click.echo(f"leaderboard page: {page}", err=True)
