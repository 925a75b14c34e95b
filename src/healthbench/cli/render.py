"""What the commands show while a run goes and once it is over: the progress bar, status lines, the failures
and the summary line, and the exit status."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from tqdm import tqdm

from healthbench.errors import GradingError, MetaGradingError
from healthbench.runs.folder import METRICS, STORE
from healthbench.runs.policy import REFUSED_REPLY
from healthbench.runs.pricing import CostMeter
from healthbench.runs.session import SessionResult

Headline = Callable[[dict[str, float | int]], str]
# The failures that say whether asking again cures them (`lasting`).
LASTING = (GradingError, MetaGradingError)


@contextmanager
def download_bar(name: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A download's bytes as a bar on stderr (a `data.cache.Transfer`)."""
    with tqdm(total=total, unit="B", unit_scale=True, desc=name) as bar:

        def advance(received: int) -> None:
            bar.update(received)

        yield advance


class _AboveTheBar:
    """A stream for log lines that writes each above the progress bar, on stderr as it is when written."""

    def write(self, text: str) -> None:
        if text.strip():
            tqdm.write(text.rstrip("\n"), file=sys.stderr)

    def flush(self) -> None:
        sys.stderr.flush()


_LOG_LINES = logging.StreamHandler(_AboveTheBar())
_LOG_LINES.setFormatter(logging.Formatter("healthbench: %(message)s"))


def show_logs(level: str) -> None:
    """Show the package's log lines from `level` up (`info`: a line per retry) on stderr, above the progress
    bar; by default (`warning`) only what a user must know, so the bar stays readable."""
    package = logging.getLogger("healthbench")
    package.setLevel(level.upper())
    if _LOG_LINES not in package.handlers:
        package.addHandler(_LOG_LINES)


class Bar:
    """A `Progress` on the terminal: a tqdm bar with the pace and cost beside it, and status lines above it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: tqdm[Any] | None = None

    def start(self, total: int, unit: str) -> None:
        """Open the bar (only on a terminal, unless asked not to at all)."""
        self._bar = tqdm(total=total, unit=unit, desc="healthbench", disable=not self.enabled or None)

    def advance(self, status: Callable[[], str]) -> None:
        """One more done; the status is computed only when the bar is shown."""
        if self._bar is None:
            return
        self._bar.update()
        if not self._bar.disable:
            self._bar.set_postfix_str(status(), refresh=False)

    def note(self, message: str) -> None:
        """A line above the bar."""
        tqdm.write(f"healthbench: {in_flags(message)}", file=sys.stderr)

    def close(self) -> None:
        """Close the bar."""
        if self._bar is not None:
            self._bar.close()


def in_flags(message: str) -> str:
    """A library message that names settings in backticks (`grader_reasoning_effort`, `reasoning=False`), said in
    the running command's flags (--grader-reasoning-effort, --no-reasoning): the library speaks in settings, which
    is what an Inspect or SDK user gives; a name the command has no flag for stays as it is."""
    context = click.get_current_context(silent=True)
    if context is None:
        return message
    command = context.command
    flags: dict[str, click.Option] = {
        param.name: param for param in command.params if isinstance(param, click.Option) and param.name
    }

    def flag(match: re.Match[str]) -> str:
        option = flags.get(match[1])
        if option is None:
            return match[0]
        if match[2] == "=False" and option.secondary_opts:
            return option.secondary_opts[0]
        return option.opts[0]

    return re.sub(r"`(\w+)(=True|=False)?`", flag, message)


def finish(result: SessionResult, headline: Headline, unit: str, *, stop: bool = True) -> bool:
    """Say how the session ended: each failure and an exit status of 1 (with `stop`; without, False is returned
    and the caller exits), samples left in batches, or the score with what the session cost."""
    outcome, folder = result.outcome, result.folder
    for failure in outcome.failures:
        click.echo(f"healthbench: not graded: {in_flags(str(failure))}", err=True)
    if outcome.deferred:
        click.echo(
            f"healthbench: {outcome.deferred} of {result.samples} {unit} wait on {result.batches_out} batch(es) "
            "still out, and nothing of theirs is sent again; run the same command again to collect them.",
            err=True,
        )
    if outcome.failures:
        lasting = sum(1 for failure in outcome.failures if isinstance(failure, LASTING) and failure.lasting)
        # Only where a rerun can finish is one offered: what failed in a way asking again does not cure waits on a
        # change the failures name (new grader settings make a new run: another output folder).
        then = (
            "run the same command again to finish"
            if not lasting
            else f"{lasting} of them failed in a way asking again does not cure, so the same command would not "
            "finish the run: change what they name first (new grader settings in a new output folder)"
        )
        click.echo(
            f"healthbench: {len(outcome.failures)} of {result.samples} {unit} could not be graded; no score "
            f"written. Everything answered is kept in {folder / STORE}: {then}.",
            err=True,
        )
        if stop:
            sys.exit(1)
        return False
    if outcome.metrics is None:
        return True
    calls = outcome.policy_usage.calls + outcome.grader_usage.calls
    batched = f" in {result.batches_submitted} batches" if result.batched else ""
    marks = ""
    if outcome.refused:
        marks = f" ({outcome.refused} refused by the model and graded as the reply {REFUSED_REPLY!r})"
    if outcome.suspect:
        many = "reply" if outcome.suspect == 1 else "replies"
        marks += f" ({outcome.suspect} {many} marked suspect, addressing the grader: see suspect in results.jsonl)"
    report = f", report in {result.report}" if result.report is not None else ""
    cost = CostMeter.describe(result.usage.this_session or result.usage.whole_run)
    click.echo(
        f"{headline(outcome.metrics)}{marks}; {calls} calls this session{batched} ({result.cache_hits} verdicts "
        f"reused), cost {cost}; metrics in {folder / METRICS}{report}"
    )
    return True
