"""The flags the commands share, and what they are made into: grader settings, batches, sampling, length
adjustment, and whether a HealthBench Professional run is in its official configuration."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import click

from healthbench.api.batch.records import BatchSettings, BatchTokens, PollInterval
from healthbench.api.endpoint import (
    MAX_IN_FLIGHT,
    MOST_IN_FLIGHT,
    REASONING_TIMEOUT,
    Attempts,
    Concurrency,
    OutputTokens,
    RequestsPerMinute,
    Timeout,
    TokensPerMinute,
)
from healthbench.api.pacing.store import PACE_STORE_VARIABLE
from healthbench.api.wire import EFFORTS
from healthbench.cli.bounds import bounded
from healthbench.data.source import TaskSource
from healthbench.grading.bootstrap import Seed
from healthbench.grading.grader import GRADER_CALLS
from healthbench.grading.settings import DEFAULT_CONCURRENCY, GraderConfig, GradingOptions, LengthCenter, LengthPenalty
from healthbench.runs.policy import PolicyConfig, Temperature
from healthbench.runs.session import BatchChoice

F = TypeVar("F", bound=Callable[..., Any])


def options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several click decorators as one."""

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


_CALLS_HELP = (
    "Grader calls per reply: per-item, one per rubric item (the reference's; the official score), or per-reply, one "
    "call for all of a reply's items (about a tenth of the calls and far fewer tokens, but not the reference's "
    "grading: its agreement with physicians is what meta-eval measures on your grader) [default: per-item]."
)


def _calls_flag(choices: tuple[str, ...], extra_help: str = "") -> Callable[[F], F]:
    return click.option("--grader-calls", type=click.Choice(choices), help=_CALLS_HELP + extra_help)


def _joined(_context: click.Context, _parameter: click.Parameter, urls: tuple[str, ...]) -> str | None:
    """A flag given several times as the settings take it: comma-separated (a pool of servers); None if not given."""
    return ",".join(urls) or None


_grader_endpoint_flags = (
    click.option(
        "--grader-model",
        help="Grader model [default: $HEALTHBENCH_GRADER_MODEL, else gpt-4.1-2025-04-14; gpt-5.4-2026-03-05 "
        "for HealthBench Professional].",
    ),
    click.option(
        "--grader-base-url",
        multiple=True,
        callback=_joined,
        help="Grader endpoint; given several times (or comma-separated), a pool of servers of the grader model "
        "(self-hosted judge replicas): a reply's items go to one server, each server keeps its own --concurrency "
        "and pace, and a server that fails is taken out and tried again later [default: "
        "$HEALTHBENCH_GRADER_BASE_URL (comma-separated for a pool) or OpenAI].",
    ),
)
# How a grader is asked, whichever it is: `judges` takes these for all its graders, each named by --grader.
_grader_request_flags = (
    click.option(
        "--grader-api",
        type=click.Choice(["chat", "responses"]),
        help="Chat Completions or the Responses API [default: chat; responses for HealthBench Professional].",
    ),
    click.option(
        "--grader-reasoning/--no-grader-reasoning",
        default=None,
        help="Treat the grader as a reasoning model: no temperature, no max_tokens [default: by name].",
    ),
    click.option(
        "--grader-reasoning-effort",
        type=click.Choice(EFFORTS),
        help="A reasoning grader's effort [default: the model's; low for HealthBench Professional].",
    ),
    click.option(
        "--grader-max-output-tokens",
        type=bounded(OutputTokens),
        help="Grader output cap [default: 2048, the reference's; none for a reasoning grader].",
    ),
    click.option(
        "--grader-system-message/--no-grader-system-message",
        default=None,
        help='Send the reference\'s grader system message "You are a helpful assistant." (a developer '
        "message in the Responses API) [default: with chat, not with responses].",
    ),
    click.option(
        "--prompt-cache-key/--no-prompt-cache-key",
        "grader_prompt_cache_key",
        default=None,
        help="Send each grader request a prompt_cache_key, the same for the requests of one reply (of one task, "
        "per-reply), so OpenAI routes them to one prompt cache (cached input is billed at a fraction); off for an "
        "endpoint that refuses fields it does not know. The prompts are the same either way [default: on].",
    ),
    click.option(
        "--concurrency",
        "grader_concurrency",
        type=bounded(Concurrency),
        help=f"Grader calls in flight at once, one budget for the whole process at each grader server [default: "
        f"{DEFAULT_CONCURRENCY}, growing once the limits are known to what they and the latency need, up to "
        f"{MAX_IN_FLIGHT:,}; a value given is a ceiling the budget stays at: at most {MAX_IN_FLIGHT:,} at OpenAI's "
        f"API, {MOST_IN_FLIGHT:,} at a server of your own].",
    ),
    click.option(
        "--max-attempts",
        "grader_max_attempts",
        type=bounded(Attempts),
        default=12,
        show_default=True,
        help="Attempts per call before the sample fails.",
    ),
    click.option(
        "--grader-timeout",
        type=bounded(Timeout),
        help="Seconds a grader call's attempt may take before it counts as lost and is asked again [default: 120; "
        f"{REASONING_TIMEOUT:g} for a reasoning grader].",
    ),
    click.option(
        "--grader-rpm",
        type=bounded(RequestsPerMinute),
        help="The grader key's requests-per-minute limit [default: learned from the server's answers].",
    ),
    click.option(
        "--grader-tpm",
        type=bounded(TokensPerMinute),
        help="The grader key's tokens-per-minute limit (prompt plus max_tokens, as OpenAI counts) [default: "
        "learned from the server's answers].",
    ),
    click.option(
        "--pace-store",
        "grader_pace_store",
        metavar="redis://HOST:PORT/DB",
        help="Share each key's pace (its limits, how fast it may go, a 429's hold) with every process naming "
        f"this Redis: replicas, parallel runs [default: ${PACE_STORE_VARIABLE}, else each process alone].",
    ),
)
_grader_flags = (*_grader_endpoint_flags, *_grader_request_flags)
grader_options = options(*_grader_flags, _calls_flag(GRADER_CALLS))
# meta-eval's: `both` runs the meta-evaluation in each mode and sets them side by side.
BOTH_CALLS = "both"
meta_grader_options = options(
    *_grader_flags,
    _calls_flag(
        (*GRADER_CALLS, BOTH_CALLS),
        " both: each into a folder of its own under --out (per-item/, per-reply/), then the two side by side.",
    ),
)

# `judges`': every grader's request flags, its graders named by --grader; `both` as meta-eval's.
judges_grader_options = options(
    *_grader_request_flags,
    _calls_flag(
        (*GRADER_CALLS, BOTH_CALLS),
        " both: each grader in each mode, a folder of its own per mode (GRADER/per-item/, GRADER/per-reply/).",
    ),
)

batch_options = options(
    click.option(
        "--batch",
        is_flag=True,
        help="Grade through the OpenAI Batch API: half price, results within 24 hours. Killed or closed while "
        "waiting, the same command re-attaches to the batches it submitted.",
    ),
    click.option(
        "--poll-interval",
        type=bounded(PollInterval),
        help=f"With --batch: seconds between batch status checks [default: {BatchSettings().poll_interval:g}].",
    ),
    click.option(
        "--batch-tokens",
        type=bounded(BatchTokens),
        help="With --batch: most tokens queued in batches at once (your organization's batch queue limit for "
        "the model) [default: found from refused batches].",
    ),
    click.option(
        "--no-wait",
        is_flag=True,
        help="With --batch: submit, collect what is finished, and exit; the same command later goes on.",
    ),
)


sampling_options = options(
    click.option("--system-message", help="Sent to the model first; it also heads the graded transcript."),
    click.option("--temperature", type=bounded(Temperature), help="Sampling temperature [default: the provider's]."),
    click.option("--max-tokens", type=bounded(OutputTokens), help="Reply length cap."),
    click.option("--reasoning/--no-reasoning", default=None, help="Treat as a reasoning model [default: by name]."),
    click.option(
        "--reasoning-effort",
        type=click.Choice(EFFORTS),
        help="A reasoning model's effort [default: the model's]; a model not treated as one (--reasoning) takes none.",
    ),
    click.option(
        "--policy-concurrency",
        type=bounded(Concurrency),
        help="Model calls in flight at once [default: 32, growing with the model key's limits as --concurrency "
        "does; a value given is a ceiling].",
    ),
    click.option(
        "--rpm",
        type=bounded(RequestsPerMinute),
        help="The model key's requests-per-minute limit [default: learned].",
    ),
    click.option(
        "--tpm",
        type=bounded(TokensPerMinute),
        help="The model key's tokens-per-minute limit [default: learned].",
    ),
    click.option(
        "--timeout",
        type=bounded(Timeout),
        help="Seconds a model call's attempt may take before it counts as lost and is asked again [default: "
        f"{REASONING_TIMEOUT:g}].",
    ),
    click.option("--policy-batch", is_flag=True, help="With --batch, sample the model's replies in batches too."),
    click.option(
        "--policy-errors",
        type=click.Choice(["grade", "fail"]),
        default="grade",
        show_default=True,
        help="A prompt the model's provider refuses (invalid_prompt, a content filter, a context too long): grade "
        "the reference's reply 'No response (bad request).' for it, or fail the sample (no score).",
    ),
)


def policy_from_flags(
    model: str,
    base_url: str | None,
    grader: GraderConfig,
    *,
    policy_concurrency: int | None,
    **sampling: Any,
) -> PolicyConfig:
    """The model's settings from `sampling_options`' flags (all but --policy-batch), with the grader's bound
    on attempts and its pace store."""
    return PolicyConfig.from_env(
        base_url=base_url,
        model=model,
        concurrency=policy_concurrency,
        max_attempts=grader.max_attempts,  # the one --max-attempts flag bounds both sides
        pace_store=grader.pace_store,  # one store for the process: the model's key may be the grader's
        **sampling,
    )


def _length_flags(center: str, penalty: str, off: str) -> Callable[[F], F]:
    return options(
        click.option(
            "--length-adjustment-center",
            type=bounded(LengthCenter),
            help="Length adjustment: the reply length in characters that is neither penalised nor rewarded "
            f"[default: {center}].",
        ),
        click.option(
            "--length-adjustment-penalty-per-500-chars",
            type=bounded(LengthPenalty),
            help="Length adjustment: score taken off per 500 characters past the center (and given per 500 short "
            f"of it) [default: {penalty}].",
        ),
        click.option("--no-length-adjustment", is_flag=True, help=off),
    )


# The grading commands' (HealthBench Professional is told by --subset or by a --data file's schema), and
# `report`'s, which rescores a finished run.
length_options = _length_flags(
    "none; 2000 for HealthBench Professional",
    "none; 0.0147 for HealthBench Professional",
    "No length adjustment, even for HealthBench Professional.",
)
rescoring_length_options = _length_flags(
    "the run's", "the run's", "Rescore without a length adjustment, even a run that had one."
)

# How `--dry-run` answers: a summary for people, or JSON (`--json`).
DryRun = Literal["text", "json"]


@dataclasses.dataclass(frozen=True)
class RunFlags:
    """What `run_options`' flags ask of a run: its folder, bootstrap seed, price table, whether a progress bar is
    shown, and `dry_run`: None, or how the estimate is printed instead of running."""

    out: Path
    seed: int
    prices: Path | None
    progress: bool
    dry_run: DryRun | None


def _run_flags(func: F) -> F:
    """Hand `run_options`' flags to a command as one `run` (`RunFlags`), `--dry-run` and `--json` made one."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        out: Path,
        seed: int,
        prices: Path | None,
        progress: bool,
        dry_run: bool,
        as_json: bool,
        **kwargs: Any,
    ) -> Any:
        if as_json and not dry_run:
            raise click.UsageError("--json goes with --dry-run")
        form: DryRun | None = ("json" if as_json else "text") if dry_run else None
        run = RunFlags(out=out, seed=seed, prices=prices, progress=progress, dry_run=form)
        return func(*args, run=run, **kwargs)

    return cast(F, wrapper)


class NamedPath(click.Path):
    """A `click.Path` that refuses the empty string, which `Path("")` would make the current folder."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail('is empty: name a path ("." for the current folder)', param, ctx)
        return super().convert(value, param, ctx)


run_options = options(
    click.option("--out", required=True, type=NamedPath(file_okay=False, path_type=Path), help="Output folder."),
    click.option("--seed", type=bounded(Seed), default=0, show_default=True, help="Bootstrap seed."),
    click.option("--prices", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Price table JSON."),
    click.option("--progress/--no-progress", default=True, help="Show a progress bar on a terminal."),
    click.option(
        "--dry-run",
        is_flag=True,
        help="Print the calls, tokens, cost (live and batch) and least wall time of this run, and stop.",
    ),
    click.option("--json", "as_json", is_flag=True, help="With --dry-run: print the estimate as JSON."),
    _run_flags,
)


_GRADING_FLAGS = tuple(GradingOptions.model_fields)


def _batch_choice(batch: bool, poll_interval: float | None, tokens: int | None, no_wait: bool) -> BatchChoice | None:
    given = (("--poll-interval", poll_interval), ("--batch-tokens", tokens), ("--no-wait", no_wait or None))
    for flag, value in given:
        if value is not None and not batch:
            raise click.UsageError(f"{flag} needs --batch")
    if not batch:
        return None
    settings = BatchSettings(wait=not no_wait, max_tokens=tokens)
    if poll_interval is not None:
        settings = dataclasses.replace(settings, poll_interval=poll_interval)
    return BatchChoice(settings)


def grading_options(flags: dict[str, Any]) -> GradingOptions:
    """The grader and length-adjustment flags (taken out of `flags`) as the one grader-settings model."""
    return GradingOptions(**{name: flags.pop(name) for name in _GRADING_FLAGS if name in flags})


def grading(func: F) -> F:
    """Add the grader and batch flags to a grading command, and hand them to it made into `plan` (the grader
    settings and length adjustment, with the official defaults of what it grades: the kind of its `tasks`, see
    `graded_tasks`, said on stderr when a Professional run is not in its official configuration) and `batch`
    (None for live grading). The command's length flags (`length_options`), when it has them, go into the plan."""

    @functools.wraps(func)
    def wrapper(
        *args: Any, batch: bool, poll_interval: float | None, batch_tokens: int | None, no_wait: bool, **kwargs: Any
    ) -> Any:
        tasks = kwargs.get("tasks")
        plan = grading_options(kwargs).plan(tasks.kind if isinstance(tasks, TaskSource) else None)
        if plan.differences:
            click.echo(
                "healthbench: this is not HealthBench Professional's official configuration: "
                + "; ".join(map(str, plan.differences)),
                err=True,
            )
        choice = _batch_choice(batch, poll_interval, batch_tokens, no_wait)
        return func(*args, plan=plan, batch=choice, **kwargs)

    return cast(F, grader_options(batch_options(wrapper)))


def meta_grading(func: F) -> F:
    """`grading` for meta-eval, whose `--grader-calls` also takes `both`: the command gets `plans`, how each mode
    to run grades (one, or per-item and per-reply)."""

    @functools.wraps(func)
    def wrapper(
        *args: Any, batch: bool, poll_interval: float, batch_tokens: int | None, no_wait: bool, **kwargs: Any
    ) -> Any:
        both = kwargs.get("grader_calls") == BOTH_CALLS
        if both:
            kwargs["grader_calls"] = None
        plan = grading_options(kwargs).plan(None)
        plans = [plan]
        if both:
            plans = [
                dataclasses.replace(plan, grader=plan.grader.model_copy(update={"calls": c})) for c in GRADER_CALLS
            ]
        choice = _batch_choice(batch, poll_interval, batch_tokens, no_wait)
        return func(*args, plans=plans, batch=choice, **kwargs)

    return cast(F, meta_grader_options(batch_options(wrapper)))
