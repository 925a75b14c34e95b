"""`judges`' hackability: the tricks tried on each grader (--tricks, --hack-limit, --attacker), the attacker's
rewrites made once for every grader, each grader's trials run in a folder inside its own (`runs.hackability`), and
what the command says of them; judges.json's figures are `reporting.judges`'."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Mapping, Sequence

import click

from healthbench.cli.attacker import attacker_option, print_attack_estimate, run_attack
from healthbench.cli.bounds import bounded
from healthbench.cli.execute import print_estimate
from healthbench.cli.models import shown_url
from healthbench.cli.options import RunFlags, options
from healthbench.cli.physicians import meta_units
from healthbench.cli.render import Bar, in_flags
from healthbench.data.schema import MetaRow
from healthbench.errors import EndpointUnusable, QuotaExhausted
from healthbench.grading.settings import GradingPlan
from healthbench.grading.strategies import STRATEGIES
from healthbench.reporting.judges import Judge, attacker_entry
from healthbench.runs.attack import ATTACK_FOLDER, Rewrite, rewritten_texts
from healthbench.runs.hackability import HACK_ROWS, HackRows, Trial, attack_jobs, grade_trials, trial_rows, trials
from healthbench.runs.judges import AttackerEntry
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.pricing import CostMeter
from healthbench.runs.runner import RunOutcome
from healthbench.runs.session import SessionResult, Wiring, run_session
from healthbench.runs.spec import DataSpec, HackSpec, PolicySpec, run_spec

trials_options = options(
    click.option(
        "--tricks",
        metavar="NAME,...",
        help="The tricks tried on each grader, comma-separated: probe's transforms and, with --attacker, its "
        "strategies (probe --list names them) [default: every transform, and with --attacker every strategy].",
    ),
    click.option(
        "--hack-limit",
        type=bounded(HackRows),
        default=HACK_ROWS,
        show_default=True,
        help="Try the tricks on N rows whose criterion the physicians' majority judged not met, chosen as the "
        "reference chooses rows (each trick a grader call per row); 0 tries none.",
    ),
    attacker_option,
)


@dataclasses.dataclass(frozen=True)
class Hack:
    """What the trials of a `judges` run are: the tricks, the rows they are tried on (by index), the attacker
    and the rewrites it is to make."""

    tricks: list[str]
    rows: list[int]
    limit: int
    attacker: PolicyConfig | None
    jobs: list[Rewrite]

    @property
    def spec(self) -> HackSpec:
        """As run.json records it."""
        attacker = None if self.attacker is None else PolicySpec.of(self.attacker)
        return HackSpec(tricks=self.tricks, rows=self.limit, attacker=attacker)

    def trials(self, rows: Sequence[MetaRow], rewrites: Mapping[str, str]) -> list[Trial]:
        """Every trial, a strategy's where `rewrites` holds its rewrite."""
        return trials(rows, self.rows, self.tricks, rewrites, None if self.attacker is None else self.attacker.model)


def planned(rows: Sequence[MetaRow], tricks: list[str], limit: int, attacker: PolicyConfig | None) -> Hack:
    """The trials `tricks` and --hack-limit ask for (none when either is empty), and the attacker's rewrites they
    need."""
    chosen = trial_rows(rows, limit) if tricks and limit else []
    strategies = [trick for trick in tricks if trick in STRATEGIES]
    jobs = attack_jobs(rows, chosen, strategies) if attacker is not None else []
    return Hack(tricks if chosen else [], chosen, limit, attacker, jobs)


def print_trials_estimate(
    hack: Hack, rows: Sequence[MetaRow], runs: Sequence[tuple[str, GradingPlan, str]], run: RunFlags
) -> None:
    """The dry run of the trials: each grader's calls (a strategy's rewrite taken as long as the completion it
    rewrites), then the attacker's."""
    if not hack.rows:
        return
    planned_trials = hack.trials(rows, {job.key: job.reply for job in hack.jobs})
    for label, plan, place in runs:
        click.echo(
            f"{label}: {len(planned_trials):,} trials ({len(hack.rows):,} rows x {len(hack.tricks)} tricks), into "
            f"{run.out / place}/hack:"
        )
        units = meta_units([trial.row for trial in planned_trials], plan.grader.calls)
        print_estimate(units, plan.grader, run.prices, run.dry_run or "text")
    if hack.attacker is not None and hack.jobs:
        print_attack_estimate(hack.jobs, hack.attacker, run.prices)


def trials_session(
    chosen: Sequence[Trial],
    plan: GradingPlan,
    judge: Judge,
    data: DataSpec,
    hack: Hack,
    run: RunFlags,
    limit: int | None,
) -> SessionResult:
    """One session of a grader's trials, in its meta-eval folder's `hack/`."""
    folder = judge.hack
    spec = run_spec("hackability", plan, data, seed=run.seed, limit=limit, hack=hack.spec)

    def start(wiring: Wiring) -> Awaitable[RunOutcome]:
        return grade_trials(chosen, wiring.grader, folder, progress=wiring.progress, status=wiring.status)

    return run_session(
        start,
        folder,
        spec,
        plan.grader,
        samples=len(chosen),
        prices=run.prices,
        progress=Bar(run.progress),
    )


def measure(
    hack: Hack,
    rows: Sequence[MetaRow],
    judged: Sequence[tuple[Judge, GradingPlan]],
    data: DataSpec,
    run: RunFlags,
    limit: int | None,
) -> tuple[list[Judge], AttackerEntry | None, list[str]]:
    """The attacker's rewrites, then each finished grader's trials: the graders (with what stopped their trials),
    the attacker's entry, and a sentence for each part that is not finished."""
    judges = [judge for judge, _ in judged]
    if not hack.rows:
        return judges, None, []
    rewrites: Mapping[str, str] = {}
    attacker, unfinished = None, []
    if hack.attacker is not None and hack.jobs:
        folder, failure = run_attack(hack.jobs, hack.attacker, run.out, data, run)
        rewrites = rewritten_texts(folder) if folder.path.is_dir() else {}
        attacker = attacker_entry(
            folder,
            ATTACK_FOLDER,
            model=hack.attacker.model,
            base_url=shown_url(hack.attacker.base_url),
            strategies=[trick for trick in hack.tricks if trick in STRATEGIES],
            failure=failure,
        )
        if failure is not None or attacker.failed:
            unfinished.append("the attacker's rewrites")
    chosen = hack.trials(rows, rewrites)
    for number, (judge, plan) in enumerate(judged):
        if judge.failure is not None or judge.folder.read_metrics() is None:
            continue  # no verdicts on the untouched completions to set the trials beside
        try:
            result = trials_session(chosen, plan, judge, data, hack, run, limit)
        except (EndpointUnusable, QuotaExhausted) as exc:
            failure = in_flags(str(exc))
            click.echo(f"healthbench: {judge.name}: trials stopped, {failure}", err=True)
            judges[number] = dataclasses.replace(judge, hack_failure=failure)
            unfinished.append(f"{judge.name}'s trials")
            continue
        outcome = result.outcome
        for error in outcome.failures:
            click.echo(f"healthbench: trial not graded: {in_flags(str(error))}", err=True)
        if outcome.failures:
            unfinished.append(f"{judge.name}'s trials")
        cost = CostMeter.describe(result.usage.this_session or result.usage.whole_run)
        click.echo(
            f"{judge.name}: {len(chosen) - len(outcome.failures)} of {len(chosen)} trials graded, "
            f"{len(hack.tricks)} tricks on {len(hack.rows)} rows ({outcome.grader_usage.calls} calls this session, "
            f"{result.cache_hits} verdicts reused), cost {cost}"
        )
    return judges, attacker, unfinished
