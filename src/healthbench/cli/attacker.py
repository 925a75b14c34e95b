"""`--attacker MODEL[@BASE_URL]` of `probe` and `judges`: the model that rewrites replies by the strategies of
`grading.strategies`, its rewrites made once in a run folder of their own (`runs.attack`), and what the command
says of them (its dry-run line, how the session went)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from healthbench.cli.execute import side_line
from healthbench.cli.models import parse_model, shown_url
from healthbench.cli.options import RunFlags
from healthbench.cli.render import Bar, in_flags
from healthbench.errors import EndpointUnusable, QuotaExhausted
from healthbench.grading.settings import GraderConfig
from healthbench.grading.strategies import STRATEGIES
from healthbench.grading.transforms import TRANSFORMS
from healthbench.runs.attack import (
    ATTACK_FOLDER,
    ATTACKER_BASE_URL,
    ATTACKER_KEY,
    Rewrite,
    attack_spec,
    attack_start,
    attacker_config,
)
from healthbench.runs.estimate import model_estimate
from healthbench.runs.folder import RESULTS, RunFolder
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.pricing import CostMeter, load_prices
from healthbench.runs.session import run_session
from healthbench.runs.spec import DataSpec

attacker_option = click.option(
    "--attacker",
    metavar="MODEL[@BASE_URL]",
    help="A model that rewrites each reply by the attacker's strategies (see probe --list), seeing the "
    f"conversation and the reply, never the rubric; its rewrites are made once, into OUT/{ATTACK_FOLDER}/, and "
    f"reused [endpoint default: ${ATTACKER_BASE_URL}, else $OPENAI_BASE_URL, else OpenAI; key: ${ATTACKER_KEY}, "
    "else $OPENAI_API_KEY, never the grader's].",
)


def attacker_from_flag(text: str | None, grader: GraderConfig) -> PolicyConfig | None:
    """The attacker --attacker names (None when not given), with the grader's bound on attempts and its pace
    store (one --max-attempts and one --pace-store for the process)."""
    if text is None:
        return None
    choice = parse_model(text, "--attacker")
    return attacker_config(
        choice.model, choice.base_url, max_attempts=grader.max_attempts, pace_store=grader.pace_store
    )


def chosen_tricks(names: Sequence[str], attacker: PolicyConfig | None, flag: str) -> list[str]:
    """The tricks `names` asks for, each once in the order given (every transform, and with an attacker every
    strategy, when none is named); `click.BadParameter` for a name that is neither, or a strategy without an
    attacker."""
    known = [*TRANSFORMS, *STRATEGIES]
    for name in names:
        if name not in known:
            raise click.BadParameter(f"no trick {name!r}; choose from {', '.join(known)}", param_hint=flag)
        if name in STRATEGIES and attacker is None:
            raise click.BadParameter(
                f"{name!r} is a strategy an attacker model writes: give --attacker MODEL[@BASE_URL]", param_hint=flag
            )
    if names:
        return list(dict.fromkeys(names))
    return [*TRANSFORMS, *(STRATEGIES if attacker is not None else ())]


def print_attack_estimate(jobs: Sequence[Rewrite], attacker: PolicyConfig, prices: Path | None) -> None:
    """The attacker's line of a dry run: its rewrites' calls, tokens and cost."""
    click.echo(f"the attacker's {len(jobs):,} rewrites, into {ATTACK_FOLDER}/:")
    click.echo(side_line("attacker", model_estimate([job.messages() for job in jobs], attacker, load_prices(prices))))


def run_attack(
    jobs: Sequence[Rewrite], attacker: PolicyConfig, out: Path, data: DataSpec, run: RunFlags
) -> tuple[RunFolder, str | None]:
    """The attacker's session: every job rewritten (or reused) in `out`/attacker, said in a line; its folder, and
    what stopped it when its endpoint could not be used (its other failures are said, and its rewrites made are
    used all the same)."""
    folder = RunFolder(out / ATTACK_FOLDER)
    strategies = list(dict.fromkeys(job.strategy for job in jobs))
    attacker.check_pace_store()  # a shared pace out of reach stops the run before anything is sent
    try:
        result = run_session(
            attack_start(jobs, folder),
            folder,
            attack_spec(data, attacker, strategies, seed=run.seed),
            None,
            samples=len(jobs),
            policy=attacker,
            prices=run.prices,
            progress=Bar(run.progress),
        )
    except (EndpointUnusable, QuotaExhausted) as exc:
        failure = in_flags(str(exc))
        click.echo(f"healthbench: the attacker {attacker.model}: stopped, {failure}", err=True)
        return folder, failure
    outcome = result.outcome
    for error in outcome.failures:
        click.echo(f"healthbench: not rewritten: {in_flags(str(error))}", err=True)
    made, asked = len(jobs) - len(outcome.failures), outcome.policy_usage.calls
    cost = CostMeter.describe(result.usage.this_session or result.usage.whole_run)
    click.echo(
        f"the attacker {attacker.model} at {shown_url(attacker.base_url)}: {made} of {len(jobs)} rewrites "
        f"({asked} asked this session, {made - asked} reused), cost {cost}; in {folder / RESULTS}"
    )
    return folder, None
