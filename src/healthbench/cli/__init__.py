"""The `healthbench` command line: the grading commands in `grading`, the commands around runs in `runs`,
the flags they share in `options`."""

from __future__ import annotations

import atexit
import gc

import click

from healthbench.cli.export import export
from healthbench.cli.grading import evaluate, grade
from healthbench.cli.judges import judges
from healthbench.cli.leaderboard import leaderboard
from healthbench.cli.physicians import baseline, meta_eval
from healthbench.cli.probe import probe
from healthbench.cli.render import show_logs
from healthbench.cli.runs import batches, compare, download, report, serve

GC_THRESHOLD = 50_000
"""Allocations (net of frees) between two collections of the youngest generation, for every command."""


@click.group()
@click.version_option(package_name="healthbench")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="warning",
    show_default=True,
    envvar="HEALTHBENCH_LOG_LEVEL",
    help="Log lines shown on stderr: info adds one per retry (status, wait, attempt, the provider's request id) "
    "[env: HEALTHBENCH_LOG_LEVEL].",
)
@click.option("-v", "--verbose", is_flag=True, help="Same as --log-level info.")
def main(log_level: str, verbose: bool) -> None:
    """HealthBench: grade health conversations against physician rubrics, as OpenAI's reference does."""
    show_logs("info" if verbose and log_level.lower() in ("warning", "error") else log_level)
    # A run allocates dozens of short-lived objects per grader call: at the default threshold (700) the collector
    # ran 500-700 times in `grade` of the 500 sample rows (5,965 calls), four or five of them over every object
    # loaded, and took 11-16% of its CPU; at 50,000 it runs a handful of times once the modules are imported, and
    # the peak memory is the same.
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    # The interpreter's exit collects every object the run left (rows, verdicts, the modules' own) several times
    # over, 0.1-0.15 s after `grade`'s last answer; frozen, they are left to the process's end. Every file and
    # connection is closed before then, so nothing waits on that collection.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


for command in (download, grade, evaluate, baseline, meta_eval, probe, report, batches, compare, leaderboard, serve):
    main.add_command(command)
main.add_command(judges)
main.add_command(export)
