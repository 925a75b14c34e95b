"""The commands around runs: `download` the data, `report` and `compare` finished runs, look after a run's
`batches`, and `serve` the environment."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from healthbench.api.endpoint import MAX_IN_FLIGHT
from healthbench.cli.bounds import bounded
from healthbench.cli.failures import user_errors
from healthbench.cli.options import grader_options, grading_options, rescoring_length_options
from healthbench.cli.physicians import meta_headline
from healthbench.cli.render import download_bar, in_flags
from healthbench.cli.serving import access_from_flags, access_options
from healthbench.cli.tasks import data_flag_offered, professional_note
from healthbench.data.source import TaskSource
from healthbench.data.splits import SPLITS, why_empty
from healthbench.data.subsets import DOWNLOADABLE, TASK_SUBSETS
from healthbench.errors import MissingExtra, RequestFailed, SettingsError
from healthbench.grading.bootstrap import Bootstraps, Seed
from healthbench.grading.settings import GraderConfig, GradingOptions
from healthbench.integrations.openreward.deployment import ENVIRONMENT, ENVIRONMENTS
from healthbench.integrations.rewardsetup import SERVED_CONCURRENCY
from healthbench.reporting.report import rebuild, unfinished, write_meta_report, write_report
from healthbench.runs.folder import PROBE, PROBE_PAGE, RESULTS, STORE, RunFolder
from healthbench.runs.lock import refuse_if_written
from healthbench.runs.metaeval import write_meta_metrics
from healthbench.runs.policy import PolicyConfig
from healthbench.runs.records import MetaRecord, SampleRecord
from healthbench.runs.spec import SIDE_RUNS
from healthbench.runs.store import Store

LOG_LEVELS = ("debug", "info", "warning", "error")


@click.command()
@click.argument("names", nargs=-1, type=click.Choice(DOWNLOADABLE))
@click.option(
    "--subset", "subsets", multiple=True, type=click.Choice(DOWNLOADABLE), help="A file to fetch, repeatable."
)
@user_errors
def download(names: tuple[str, ...], subsets: tuple[str, ...]) -> None:
    """Download and check official files: those named, as arguments or with --subset, else all of them."""
    from healthbench.data.subsets import subset_path

    for name in dict.fromkeys((*names, *subsets)) or DOWNLOADABLE:
        click.echo(f"{name}: {subset_path(name, download_bar)}")


@click.command()
@click.argument("out", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--seed", type=bounded(Seed), help="Bootstrap seed [default: the run's].")
@rescoring_length_options
@user_errors
def report(
    out: Path,
    seed: int | None,
    length_adjustment_center: float | None,
    length_adjustment_penalty_per_500_chars: float | None,
    no_length_adjustment: bool,
) -> None:
    """Rebuild OUT/metrics.json and OUT/report.html from OUT/results.jsonl (of any run, meta-eval included);
    the length adjustment is the run's unless given. A run that is not finished gets no score: its page says
    what is missing and why, and the command exits 1."""
    refuse_if_written(out)
    folder = RunFolder(out)
    run = folder.read_run()
    if run is not None and run.spec.command == "probe":
        raise click.ClickException(
            f"{out}: a probe's folder: its gains are in {folder / PROBE} and its page is {folder / PROBE_PAGE}, "
            "which the same probe command rewrites; report takes runs of grade, eval, baseline and meta-eval"
        )
    if run is not None and run.spec.command in SIDE_RUNS:
        raise click.ClickException(
            f"{out}: {SIDE_RUNS[run.spec.command]}; report takes runs of grade, eval, baseline and meta-eval"
        )
    meta = run is not None and run.spec.command == "meta-eval"
    results: Sequence[SampleRecord | MetaRecord] = folder.read_meta_results() if meta else folder.read_results()
    if not results:
        raise click.ClickException(f"{folder / RESULTS}: no results")
    missing = unfinished(run, results)
    if missing or run is None:
        page = write_meta_report(out) if meta else write_report(out)
        raise click.ClickException(
            f"{out}: not a finished run ({missing}), so no score; the page of what it holds, with what is missing "
            f"and why, is in {page}. Run the same command again to finish the run, then report it."
        )
    bootstrap_seed = run.spec.seed if seed is None else seed
    if meta:
        scored = write_meta_metrics(folder, folder.read_meta_results(), seed=bootstrap_seed)
        click.echo(f"{meta_headline(scored)}; report in {write_meta_report(out)}")
        return
    given = length_adjustment_center is not None or length_adjustment_penalty_per_500_chars is not None
    adjustment = run.spec.adjustment
    if given or no_length_adjustment:
        rescoring = GradingOptions(
            length_adjustment_center=length_adjustment_center,
            length_adjustment_penalty_per_500_chars=length_adjustment_penalty_per_500_chars,
            no_length_adjustment=no_length_adjustment,
        )
        adjustment = rescoring.length_adjustment(None)
    metrics = rebuild(out, seed=bootstrap_seed, length_adjustment=adjustment)
    kind = "length-adjusted score" if adjustment is not None else "score"
    click.echo(f"{kind} {metrics['score']:.4f} ± {metrics['score:bootstrap_std']:.4f}; report in {out / 'report.html'}")


@click.command()
@click.argument("out", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--cancel",
    is_flag=True,
    help="Cancel every batch still running. Nothing more is spent; the same run command later collects what "
    "finished and sends the rest again.",
)
@click.option("--grader-base-url", help="Grader endpoint [default: the run's, else as for grading].")
@click.option("--base-url", help="The model's endpoint, for policy batches [default: the run's, else as for eval].")
@user_errors
def batches(out: Path, cancel: bool, grader_base_url: str | None, base_url: str | None) -> None:
    """List the batches of the run in OUT not yet collected, with their status; --cancel stops them."""
    from healthbench.api.batch.files import batch_report

    folder = RunFolder(out)
    if not folder.exists(STORE):
        raise click.ClickException(f"{out}: no run here ({STORE} is missing)")
    spec = run.spec if (run := folder.read_run()) is not None else None
    recorded_policy = spec.policy if spec is not None else None
    grader = GraderConfig.from_env(base_url=grader_base_url or (spec.grader.base_url if spec else None))
    policy = PolicyConfig.from_env(
        base_url=base_url or (recorded_policy.base_url if recorded_policy else None),
        model=recorded_policy.model if recorded_policy else "unknown",
    )
    store = Store(folder / STORE)
    try:
        records = store.open_batches()
    finally:
        store.close()
    if not records:
        click.echo(f"{out}: no batches out")
        return

    async def statuses() -> list[str]:
        chats = {"grader": grader.client(), "policy": policy.client()}
        try:
            return await batch_report(chats, records, cancel=cancel)
        finally:
            for chat in chats.values():
                await chat.aclose()

    try:
        lines = asyncio.run(statuses())
    except RequestFailed as exc:
        raise click.ClickException(f"could not reach the batches of {out}: {exc}") from None
    for line in lines:
        click.echo(line)


@click.command()
@click.argument("run_a", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--seed", type=bounded(Seed), default=0, show_default=True, help="Bootstrap seed.")
@click.option("--n-bootstrap", type=bounded(Bootstraps), default=1000, show_default=True, help="Bootstrap resamples.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@user_errors
def compare(run_a: Path, run_b: Path, seed: int, n_bootstrap: int, as_json: bool) -> None:
    """Paired per-task difference of the headline scores RUN_B - RUN_A, with a bootstrap interval, overall and
    per theme and axis (per slice for Professional); two meta-eval runs side by side (macro F1 with its interval,
    calls, tokens, cost). Runs graded per item and per reply say so on the first line."""
    from healthbench.reporting.compare import compare_dirs, format_comparison
    from healthbench.reporting.metamodes import meta_pair, side_by_side, side_by_side_lines

    for run in (run_a, run_b):
        refuse_if_written(run)
    if meta_pair([RunFolder(run_a), RunFolder(run_b)]):
        figures = side_by_side([RunFolder(run_a), RunFolder(run_b)], seed=seed, n_bootstrap=n_bootstrap)
        click.echo(figures.model_dump_json(indent=2) if as_json else "\n".join(side_by_side_lines(figures)))
        return
    result = compare_dirs(run_a, run_b, seed=seed, n_bootstrap=n_bootstrap)
    click.echo(result.model_dump_json(indent=2) if as_json else format_comparison(result))


@click.command()
@click.option(
    "--data",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSONL file: the test split (a file in Professional's schema graded as the professional split is).",
)
@click.option(
    "--subset",
    "subsets",
    multiple=True,
    type=click.Choice(TASK_SUBSETS),
    help="Official subset, repeatable: full is the test split, the others are splits of their own "
    "(professional graded with its official settings) [default: full, unless --data].",
)
@click.option(
    "--heldout",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="With --data: a JSONL file whose rows (by prompt_id) form the heldout split, served beside train and "
    "validation [default: a seeded, theme-stratified 20%; the full set's is HealthBench Hard].",
)
@click.option(
    "--split-seed",
    type=bounded(Seed),
    default=0,
    show_default=True,
    help="The seed of the training splits' seeded choices (docs/training.md).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    envvar="PORT",
    help="The port to listen on [env: PORT].",
)
@click.option(
    "--default-environment",
    type=click.Choice(ENVIRONMENTS),
    default=ENVIRONMENT,
    show_default=True,
    envvar="HEALTHBENCH_DEFAULT_ENVIRONMENT",
    help="The environment of the bare paths, for clients that name none: healthbench_answer for harnesses "
    "that only call listed tools [env: HEALTHBENCH_DEFAULT_ENVIRONMENT].",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="info",
    show_default=True,
    envvar="OPENREWARD_LOG_LEVEL",
    help="The environment's log: at info a line per session created, per reward and per failure (its cause; its "
    "traceback at debug, with every request's lines) [env: OPENREWARD_LOG_LEVEL].",
)
@click.option(
    "--grader-slow-start",
    is_flag=True,
    envvar="HEALTHBENCH_GRADER_SLOW_START",
    help="Send a key whose limits are not known yet twenty grader calls, then two more with each answer, as the "
    "grading commands do, instead of the grader budget's worth at once (a trainer's step is such a burst anyway) "
    "[env: HEALTHBENCH_GRADER_SLOW_START=1].",
)
@access_options
@grader_options
@user_errors
def serve(
    data: Path | None,
    subsets: tuple[str, ...],
    heldout: Path | None,
    split_seed: int,
    port: int,
    default_environment: str,
    log_level: str,
    grader_slow_start: bool,
    **flags: Any,
) -> None:
    """Serve HealthBench as OpenReward environments: healthbench (a hidden terminal tool) and
    healthbench_answer (a listed answer tool). Sessions send the grader key as secret chat_api_key or
    OPENAI_API_KEY, else the server's own applies (HEALTHBENCH_GRADER_API_KEY, CHAT_API_KEY, OPENAI_API_KEY);
    the grader endpoint is --grader-base-url, else HEALTHBENCH_GRADER_BASE_URL, else CHAT_BASE_URL, never
    OPENAI_BASE_URL.

    Grader flags apply to every split; what they leave unset is, for the professional split, its official
    setting (gpt-5.4 at low effort through the Responses API), whose reward is also length-adjusted. A grader,
    its connections and its pace are shared by every session of its settings and key, and stay open until the
    server stops or the key has not been used for 5 minutes.

    It listens on loopback unless --host says otherwise; beyond loopback, a server that grades with a key of its
    own needs a token (--auth-token-file or HEALTHBENCH_SERVER_TOKEN), which clients send as X-API-Key (the
    OpenReward SDK client's api_key, or OPENREWARD_API_KEY) or Authorization: Bearer, or --no-auth."""
    # The SDK's loggers read their level as they are made, when the environment is first imported.
    os.environ["OPENREWARD_LOG_LEVEL"] = log_level.upper()
    from healthbench.integrations.openreward.deployment import load_splits, split_names

    try:
        from healthbench.integrations.openreward.environment import serve as serve_environment
    except ModuleNotFoundError as exc:  # the quickstart installs the package without its extras
        raise MissingExtra("serve", exc.name or "", "serve", how="bash scripts/dev serve sets it up") from None

    access, limits = access_from_flags(flags)
    # The data's training splits, as `load_splits` parts them: a heldout file goes with a file of data.
    source = TaskSource.chosen(data).splitting(None, heldout, split_seed)
    # The test split from a file is graded by its kind: Professional's settings for a file in its schema.
    kinds: dict[str, str | None] = {}
    if data is not None:
        professional_note(source)
        kinds["test"] = source.kind
    try:
        names = split_names(data, subsets)
    except SettingsError as exc:  # --data together with --subset full
        raise click.UsageError(str(exc)) from None
    # The training splits are of the test split's data, and graded as it is.
    kinds |= {split: kinds.get("test", "test") for split in SPLITS}
    options = grading_options(flags)
    plans = {split: options.plan(kinds.get(split, split), served=True) for split in names}
    graders = {split: plan.grader for split, plan in plans.items()}
    # Before any row is read or downloaded: a server that would let anyone spend its key does not start.
    if (refusal := access.refusal(graders.values())) is not None:
        raise click.ClickException(refusal)
    for config in graders.values():
        config.check_pace_store()  # a shared pace out of reach: no server, rather than one that overruns the key
    with data_flag_offered():
        splits = load_splits(data, subsets, download_bar, heldout=heldout, split_seed=split_seed)
    sizes = {split: len(splits.get(split, ())) for split in SPLITS}
    for split in SPLITS:
        if split in names and split not in splits:
            why = in_flags(why_empty(split, sizes))
            click.echo(f"healthbench: the {split} split is empty ({why}), so it is not served", err=True)
    adjustments = {split: plans[split].length_adjustment for split in splits}
    serve_environment(
        splits,
        access=access,
        limits=limits,
        port=port,
        grader={split: graders[split] for split in splits},
        adjustments=adjustments,
        default=default_environment,
        tracebacks=log_level.lower() == "debug",
        slow_start=grader_slow_start,
    )


# serve's grader budget starts higher than the grading commands' (see rewardsetup.SERVED_CONCURRENCY), which the
# shared --concurrency help cannot say.
for _option in serve.params:
    if _option.name == "grader_concurrency" and isinstance(_option, click.Option):
        _option.help = (
            f"Grader calls in flight at once, one budget for all sessions [default: {SERVED_CONCURRENCY}, growing "
            f"once the limits are known to what they and the latency need, up to {MAX_IN_FLIGHT:,}; a value given "
            "is a ceiling the budget stays at]."
        )
