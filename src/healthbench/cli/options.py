"""The flags the commands share, and what they are made into: data, grader settings, batches, length
adjustment, and whether a HealthBench Professional run is in its official configuration."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from pydantic import ValidationError

from healthbench.api.batch.records import BatchSettings
from healthbench.api.endpoint import MAX_IN_FLIGHT
from healthbench.api.pacing.store import PACE_STORE_VARIABLE
from healthbench.api.wire import EFFORTS
from healthbench.data.loading import load_rows
from healthbench.data.schema import Row
from healthbench.data.subsets import PROFESSIONAL, TASK_SUBSETS
from healthbench.errors import HealthBenchError, PolicyMisuse, QuotaExhausted, SettingsError
from healthbench.grading.official import length_adjustment_for, recorded
from healthbench.grading.scoring import LengthAdjustment
from healthbench.grading.settings import DEFAULT_CONCURRENCY, GraderConfig, GradingOptions
from healthbench.runs.session import BatchChoice

F = TypeVar("F", bound=Callable[..., Any])


def options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several click decorators as one."""

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


data_options = options(
    click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="JSONL file."),
    click.option(
        "--subset",
        type=click.Choice(TASK_SUBSETS),
        help="Official subset; professional defaults to its official grader and length adjustment.",
    ),
)

grader_options = options(
    click.option(
        "--grader-model",
        help="Grader model [default: $HEALTHBENCH_GRADER_MODEL, else gpt-4.1-2025-04-14; gpt-5.4-2026-03-05 "
        "for --subset professional].",
    ),
    click.option("--grader-base-url", help="Grader endpoint [default: $HEALTHBENCH_GRADER_BASE_URL or OpenAI]."),
    click.option(
        "--grader-api",
        type=click.Choice(["chat", "responses"]),
        help="Chat Completions or the Responses API [default: chat; responses for --subset professional].",
    ),
    click.option(
        "--grader-reasoning/--no-grader-reasoning",
        default=None,
        help="Treat the grader as a reasoning model: no temperature, no max_tokens [default: by name].",
    ),
    click.option(
        "--grader-reasoning-effort",
        type=click.Choice(EFFORTS),
        help="A reasoning grader's effort [default: the model's; low for --subset professional].",
    ),
    click.option(
        "--grader-max-output-tokens",
        type=click.IntRange(min=1),
        help="Grader output cap [default: 2048, the reference's; none for a reasoning grader].",
    ),
    click.option(
        "--grader-system-message/--no-grader-system-message",
        default=None,
        help='Send the reference\'s grader system message "You are a helpful assistant." (a developer '
        "message in the Responses API) [default: with chat, not with responses].",
    ),
    click.option(
        "--concurrency",
        "grader_concurrency",
        type=click.IntRange(min=1),
        help=f"Grader calls in flight at once, one budget for the whole process [default: {DEFAULT_CONCURRENCY}, "
        f"growing once the limits are known to what they and the latency need, up to {MAX_IN_FLIGHT:,}; a value "
        "given is a ceiling the budget stays at].",
    ),
    click.option(
        "--max-attempts",
        "grader_max_attempts",
        type=click.IntRange(min=1),
        default=12,
        show_default=True,
        help="Attempts per call before the sample fails.",
    ),
    click.option(
        "--grader-rpm",
        type=click.FloatRange(min=0, min_open=True),
        help="The grader key's requests-per-minute limit [default: learned from the server's answers].",
    ),
    click.option(
        "--grader-tpm",
        type=click.FloatRange(min=0, min_open=True),
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

batch_options = options(
    click.option(
        "--batch",
        is_flag=True,
        help="Grade through the OpenAI Batch API: half price, results within 24 hours. Killed or closed while "
        "waiting, the same command re-attaches to the batches it submitted.",
    ),
    click.option(
        "--poll-interval",
        type=click.FloatRange(min=0.01),
        default=30.0,
        show_default=True,
        help="Seconds between batch status checks.",
    ),
    click.option(
        "--batch-tokens",
        type=click.IntRange(min=1),
        help="With --batch: most tokens queued in batches at once (your organization's batch queue limit for "
        "the model) [default: found from refused batches].",
    ),
    click.option(
        "--no-wait",
        is_flag=True,
        help="With --batch: submit, collect what is finished, and exit; the same command later goes on.",
    ),
)

length_options = options(
    click.option(
        "--length-adjustment-center",
        type=click.FloatRange(min=0),
        help="Length adjustment: the reply length in characters that is neither penalised nor rewarded "
        "[default: none; 2000 for --subset professional].",
    ),
    click.option(
        "--length-adjustment-penalty-per-500-chars",
        type=click.FloatRange(min=0),
        help="Length adjustment: score taken off per 500 characters past the center (and given per 500 short "
        "of it) [default: none; 0.0147 for --subset professional].",
    ),
    click.option("--no-length-adjustment", is_flag=True, help="No length adjustment, even for --subset professional."),
)

run_options = options(
    click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder."),
    click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed."),
    click.option("--prices", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Price table JSON."),
    click.option("--progress/--no-progress", default=True, help="Show a progress bar on a terminal."),
    click.option(
        "--dry-run", is_flag=True, help="Print the calls, tokens and cost (live and batch) of this run, and stop."
    ),
)


def load_tasks(data: Path | None, subset: str | None) -> tuple[list[Row], str]:
    """The rows, and the sha256 of the file they came from (a run's identity includes its data)."""
    from healthbench.data.subsets import file_sha256, subset_path

    if (data is None) == (subset is None):
        raise click.UsageError("give exactly one of --data PATH or --subset NAME")
    if data is None:
        from healthbench.data.subsets import load_subset

        rows = load_subset(subset or "full")
        return rows, file_sha256(subset_path(subset or "full"))
    return load_rows(data), file_sha256(data)


def user_errors(func: F) -> F:
    """Turn what the package raises on purpose (bad data, settings that do not go together, a run made
    otherwise, an account without quota, a model that refuses every request) into one line and a non-zero
    exit status, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ValidationError as exc:
            raise click.UsageError("; ".join(e["msg"] for e in exc.errors(include_url=False))) from None
        except SettingsError as exc:
            raise click.UsageError(str(exc)) from None
        except (QuotaExhausted, PolicyMisuse) as exc:
            raise click.ClickException(f"stopped, {exc}") from None
        except HealthBenchError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper  # type: ignore[return-value]


_GRADING_FLAGS = tuple(name for name in GradingOptions.model_fields if name.startswith("grader_"))


def _batch_choice(batch: bool, poll_interval: float, tokens: int | None, no_wait: bool) -> BatchChoice | None:
    for flag, given in (("--batch-tokens", tokens is not None), ("--no-wait", no_wait)):
        if given and not batch:
            raise click.UsageError(f"{flag} needs --batch")
    settings = BatchSettings(poll_interval=poll_interval, wait=not no_wait, max_tokens=tokens)
    return BatchChoice(settings) if batch else None


def grading_options(flags: dict[str, Any]) -> GradingOptions:
    """The `grader_options` flags (taken out of `flags`) as the one grader-settings model."""
    return GradingOptions(**{name: flags.pop(name) for name in _GRADING_FLAGS})


def grading(func: F) -> F:
    """Add the grader and batch flags to a grading command, and hand them to it made into `grader` (the
    settings, with the official defaults of the command's `--subset`) and `batch` (None for live grading)."""

    @functools.wraps(func)
    def wrapper(
        *args: Any, batch: bool, poll_interval: float, batch_tokens: int | None, no_wait: bool, **kwargs: Any
    ) -> Any:
        grader = grading_options(kwargs).grader(kwargs.get("subset"))
        choice = _batch_choice(batch, poll_interval, batch_tokens, no_wait)
        return func(*args, grader=grader, batch=choice, **kwargs)

    return cast(F, grader_options(batch_options(wrapper)))


def length_adjustment(
    subset: str | None, center: float | None, penalty: float | None, off: bool
) -> LengthAdjustment | None:
    """The length adjustment the flags ask for: both numbers or neither; Professional's by default."""
    if off:
        if center is not None or penalty is not None:
            raise click.UsageError("--no-length-adjustment cannot be given with length adjustment settings")
        return None
    return length_adjustment_for(subset, center, penalty)


def official(subset: str | None, grader: GraderConfig, adjustment: LengthAdjustment | None) -> dict[str, Any]:
    """run.json's account of the official configuration, said on stderr when a Professional run is not in it."""
    found = grader.official_differences(adjustment) if subset == PROFESSIONAL else []
    if found:
        click.echo(
            "healthbench: this is not HealthBench Professional's official configuration: " + "; ".join(map(str, found)),
            err=True,
        )
    return recorded(subset, found)
