"""`healthbench judges`: several graders' meta-evaluations of the same physician-labelled rows, side by side, and
how easily each is fooled.

Each grader (in each grader-call mode asked) is run as `meta-eval` runs it, into a folder of its own under --out
that is itself a meta-eval run folder (it resumes, and `report` works on it); then the tricks are tried on it
(`trials`: its hackability); then judges.json and judges.html set them side by side. Graders share every grader
flag but their model and endpoint, given by --grader; their key is the grader's usual one unless --grader-key-env
names another variable for one of them."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
from pydantic import SecretStr

from healthbench.cli.attacker import attacker_from_flag, chosen_tricks
from healthbench.cli.bounds import bounded
from healthbench.cli.execute import print_estimate
from healthbench.cli.failures import user_errors
from healthbench.cli.models import GraderChoice, parse_model, shown_url
from healthbench.cli.options import BOTH_CALLS, RunFlags, grading_options, judges_grader_options, run_options
from healthbench.cli.physicians import meta_data_options, meta_headline, meta_rows, meta_session, meta_units
from healthbench.cli.render import finish, in_flags
from healthbench.cli.trials import measure, planned, print_trials_estimate, trials_options
from healthbench.errors import EndpointUnusable, QuotaExhausted
from healthbench.grading.grader import GRADER_CALLS
from healthbench.grading.settings import GradingPlan
from healthbench.reporting.judges import Judge, judges_record
from healthbench.reporting.judges_page import hackability_lines, judges_lines, write_page
from healthbench.runs.folder import JUDGES, JUDGES_PAGE, RunFolder
from healthbench.runs.judges import JudgesRecord
from healthbench.runs.spec import DataSpec, Limit

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_grader(text: str) -> GraderChoice:
    """One --grader: `MODEL` or `MODEL@BASE_URL` (`models.parse_model`)."""
    return parse_model(text, "--grader")


def folder_name(choice: GraderChoice) -> str:
    """The grader's folder under --out: its model, and its endpoint's host, port and path when it names one (a pool's
    first server's, and how many servers it has)."""
    name = choice.model
    if choice.base_url is not None:
        first, *more = choice.base_url.split(",")
        parts = urlsplit(first)
        name += "@" + f"{parts.hostname}{'' if parts.port is None else f'-{parts.port}'}{parts.path}"
        name += f"-pool{len(more) + 1}" if more else ""  # a pool: its first server, and how many in all
    return _UNSAFE.sub("_", name).strip("._") or "grader"


def key_variables(choices: Sequence[GraderChoice], pairs: Sequence[str]) -> dict[str, str]:
    """--grader-key-env MODEL=VARIABLE pairs as {grader as given: variable}; VARIABLE empty for no key. A pair
    names a grader by its text as given, or by its model when one grader has it."""
    chosen: dict[str, str] = {}
    for pair in pairs:
        name, equals, variable = pair.rpartition("=")
        if not equals or not name.strip():
            raise click.BadParameter(f"{pair!r}: expected MODEL=VARIABLE", param_hint="--grader-key-env")
        variable = variable.strip()
        if variable and not _VARIABLE.match(variable):
            raise click.BadParameter(f"{pair!r}: {variable!r} is no variable name", param_hint="--grader-key-env")
        named = [c for c in choices if c.given == name.strip()] or [c for c in choices if c.model == name.strip()]
        if len(named) != 1:
            how = "no --grader" if not named else f"{len(named)} graders"
            raise click.BadParameter(f"{pair!r}: {name.strip()!r} names {how}", param_hint="--grader-key-env")
        if named[0].given in chosen:
            raise click.BadParameter(f"{pair!r}: a second key for {named[0].given!r}", param_hint="--grader-key-env")
        chosen[named[0].given] = variable
    return chosen


def _key(choice: GraderChoice, variables: dict[str, str]) -> SecretStr | None:
    """The key of a grader whose variable --grader-key-env names (the variable's name said, never its value)."""
    variable = variables[choice.given]
    if not variable:
        return None
    value = os.environ.get(variable, "").strip()
    if not value:
        raise click.UsageError(f"--grader-key-env: {variable} (the key of {choice.given}) is not set")
    return SecretStr(value)


def _plans(choices: Sequence[GraderChoice], variables: dict[str, str], flags: dict[str, Any]) -> list[GradingPlan]:
    """Each grader's settings: the shared flags with its model and endpoint, and its key."""
    plans = []
    for choice in choices:
        plan = grading_options({**flags, "grader_model": choice.model, "grader_base_url": choice.base_url}).plan(None)
        if choice.given in variables:
            plan = dataclasses.replace(plan, grader=plan.grader.model_copy(update={"api_key": _key(choice, variables)}))
        plans.append(plan)
    return plans


def earlier_judges(
    out: Path, data_sha256: str, limit: int | None, places: set[str], dropped: Sequence[str]
) -> tuple[list[str], list[Judge]]:
    """The folders of the graders judges.json in `out` holds, in its order, and those of them this run does not
    measure (not at `places`), to be kept in it and on the page as their folders hold them, less those `dropped`
    (--drop: a grader's name there, or its model). An earlier judges.json of other rows is refused: its graders'
    figures cannot be set beside these."""
    record = RunFolder(out).read(JudgesRecord)
    earlier = [] if record is None else [entry for entry in record.judges if entry.folder not in places]
    for name in dropped:
        named = [entry for entry in earlier if name in (entry.name, entry.model)]
        if not named:
            known = ", ".join(entry.name for entry in earlier) or "none"
            raise click.BadParameter(
                f"{name!r} names no grader of {out / JUDGES} that this run does not measure (those: {known})",
                param_hint="--drop",
            )
        earlier = [entry for entry in earlier if entry not in named]
    if record is not None and earlier and (record.data_sha256, record.limit) != (data_sha256, limit):
        raise click.UsageError(
            f"{out / JUDGES} holds graders measured on other rows (data sha256 {record.data_sha256[:12]}, --limit "
            f"{record.limit}; this run: {data_sha256[:12]}, --limit {limit}), which cannot be set beside these: use a "
            "new --out, or --drop them"
        )
    if earlier:
        click.echo(
            f"healthbench: kept from {out / JUDGES}, not measured again: {', '.join(e.name for e in earlier)} "
            "(--drop NAME leaves one out)",
            err=True,
        )
    return [entry.folder for entry in record.judges] if record is not None else [], [
        Judge(
            name=entry.name,
            model=entry.model,
            base_url=entry.base_url,
            calls=entry.calls,
            folder=RunFolder(out / entry.folder),
            place=entry.folder,
            failure=entry.failure,
            hack_failure=None if entry.hackability is None else entry.hackability.failure,
        )
        for entry in earlier
    ]


def _headline(label: str, metrics: dict[str, float | int]) -> str:
    return f"{label}: {meta_headline(metrics)}"


@click.command()
@click.option(
    "--grader",
    "graders",
    multiple=True,
    metavar="MODEL[@BASE_URL]",
    help="A grader to measure, repeated for each: its model, and its OpenAI-compatible endpoint after @ "
    "(gpt-4.1-mini, Qwen/Qwen3-32B@http://localhost:8000/v1), or a pool of its servers comma-separated "
    "(Qwen/Qwen3-32B@http://judge-0:8000/v1,http://judge-1:8000/v1) [endpoint default: $HEALTHBENCH_GRADER_BASE_URL "
    "or OpenAI]. Every other grader flag applies to all (--concurrency at each server).",
)
@click.option(
    "--grader-key-env",
    "key_env",
    multiple=True,
    metavar="MODEL=VARIABLE",
    help="Read this grader's key from the environment variable VARIABLE (MODEL as given to --grader, or its model); "
    "MODEL= sends it no key [default: $HEALTHBENCH_GRADER_API_KEY, else $OPENAI_API_KEY, for every grader].",
)
@click.option(
    "--drop",
    "dropped",
    multiple=True,
    metavar="GRADER",
    help="Leave out of judges.json and the page a grader that an earlier run into --out measured and this one "
    "does not (its name there, or its model); its folder stays [default: every grader measured in --out is kept].",
)
@meta_data_options
@click.option("--limit", type=bounded(Limit), help="Grade N rows, chosen as the reference does: a cheap first look.")
@trials_options
@run_options
@judges_grader_options
@user_errors
def judges(
    graders: tuple[str, ...],
    key_env: tuple[str, ...],
    dropped: tuple[str, ...],
    tricks: str | None,
    hack_limit: int,
    attacker: str | None,
    data: Path | None,
    subset: str | None,
    limit: int | None,
    run: RunFlags,
    **flags: Any,
) -> None:
    """Measure several graders' agreement with physicians on the same rows, side by side: macro F1 overall and
    per category with intervals, cost per 1,000 rewards, latency and failures; and how often each trick fools each
    grader on rows the physicians judged not met, beside its false-met rate there (its hackability), in
    OUT/judges.json and OUT/judges.html. Each grader runs as meta-eval runs it, in a folder of its own under --out;
    run the same command again to resume."""
    if not graders:
        raise click.UsageError("give the graders to compare: --grader MODEL[@BASE_URL], once for each")
    choices = [parse_grader(text) for text in graders]
    seen: dict[str, str] = {}
    for choice in choices:
        name = folder_name(choice)
        if name in seen:
            raise click.UsageError(f"--grader {choice.given!r} and {seen[name]!r} are the same grader (folder {name})")
        seen[name] = choice.given
    variables = key_variables(choices, key_env)
    both = flags.get("grader_calls") == BOTH_CALLS
    if both:
        flags["grader_calls"] = None
    plans = _plans(choices, variables, flags)
    attacking = attacker_from_flag(attacker, plans[0].grader)
    named = [name.strip() for name in (tricks or "").split(",") if name.strip()]
    rows, data_sha = meta_rows(data, subset, limit)
    hack = planned(rows, chosen_tricks(named, attacking, "--tricks"), hack_limit, attacking)
    runs: list[tuple[GraderChoice, GradingPlan, str]] = []
    for choice, plan in zip(choices, plans, strict=True):
        name = folder_name(choice)
        if not both:
            runs.append((choice, plan, name))
            continue
        for calls in GRADER_CALLS:
            moded = dataclasses.replace(plan, grader=plan.grader.model_copy(update={"calls": calls}))
            runs.append((choice, moded, f"{name}/{calls}"))
    order, earlier = earlier_judges(run.out, data_sha, limit, {place for _, _, place in runs}, dropped)
    labels = [f"{choice.given} ({plan.grader.calls})" if both else choice.given for choice, plan, _ in runs]
    if run.dry_run:
        for choice, plan, place in runs:
            click.echo(f"{choice.given} ({plan.grader.calls}), into {run.out / place}:")
            print_estimate(meta_units(rows, plan.grader.calls), plan.grader, run.prices, run.dry_run)
        graders_runs = [(label, plan, place) for label, (_, plan, place) in zip(labels, runs, strict=True)]
        print_trials_estimate(hack, rows, graders_runs, run)
        return
    for _, plan, _ in runs:
        plan.grader.check_pace_store()  # a shared pace out of reach stops the run before anything is sent
    data_spec = DataSpec(source=str(data) if data else "subset:meta", sha256=data_sha)
    judged = []
    for label, (_, plan, place) in zip(labels, runs, strict=True):
        folder = RunFolder(run.out / place)
        failure = None
        try:
            result = meta_session(
                rows,
                plan,
                folder,
                data_spec,
                run=run,
                limit=limit,
                batch=None,
            )
        except (EndpointUnusable, QuotaExhausted) as exc:
            failure = in_flags(str(exc))
            click.echo(f"healthbench: {label}: stopped, {failure}", err=True)
        else:
            finish(result, functools.partial(_headline, label), "rows", stop=False)
        judge = Judge(
            name=label,
            model=plan.grader.model,
            base_url=shown_url(plan.grader.base_url),
            calls=plan.grader.calls,
            folder=folder,
            place=place,
            failure=failure,
        )
        judged.append((judge, plan))
    measured, attacked, hack_unfinished = measure(hack, rows, judged, data_spec, run, limit)
    # judges.json's graders in the order it had them, those it did not have after them as given.
    places = {place: number for number, place in enumerate(order)}
    record = judges_record(
        sorted([*earlier, *measured], key=lambda judge: places.get(judge.place, len(places))),
        data=data_spec.source,
        data_sha256=data_sha,
        rows=len(rows),
        limit=limit,
        seed=run.seed,
        tricks=hack.tricks,
        hack_rows=hack_limit,
        attacker=attacked,
    )
    written = RunFolder(run.out).write(record)
    page = write_page(record, run.out / JUDGES_PAGE)
    click.echo("\n".join([*judges_lines(record), *hackability_lines(record)]))
    click.echo(f"judges.json and the page in {written}, {page}")
    names = {judge.name for judge in measured}
    unfinished = [entry.name for entry in record.judges if entry.name in names and not entry.finished]
    unfinished += hack_unfinished
    if unfinished:
        click.echo(
            f"healthbench: not finished: {', '.join(unfinished)}; everything answered is kept: run the same command "
            "again to finish.",
            err=True,
        )
        sys.exit(1)
