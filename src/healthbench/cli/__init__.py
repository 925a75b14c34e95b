"""The `healthbench` command line: the grading commands in `grading`, the commands around runs in `runs`,
the flags they share in `options`."""

from __future__ import annotations

import click

from healthbench.cli.grading import evaluate, grade
from healthbench.cli.leaderboard import leaderboard
from healthbench.cli.physicians import baseline, meta_eval
from healthbench.cli.probe import probe
from healthbench.cli.runs import batches, compare, download, report, serve


@click.group()
@click.version_option(package_name="healthbench")
def main() -> None:
    """HealthBench: grade health conversations against physician rubrics, as OpenAI's reference does."""


for command in (download, grade, evaluate, baseline, meta_eval, probe, report, batches, compare, leaderboard, serve):
    main.add_command(command)
