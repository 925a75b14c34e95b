"""What a command does with what the package raises on purpose, a file it cannot use, and Ctrl-C or SIGTERM:
one line and a non-zero exit status, never a traceback."""

from __future__ import annotations

import functools
from typing import Any

import click
from pydantic import ValidationError

from healthbench.cli.options import F
from healthbench.cli.render import in_flags
from healthbench.cli.signals import Terminated, sigterm_as_ctrl_c, stopped
from healthbench.errors import (
    EndpointUnusable,
    HealthBenchError,
    Interrupted,
    PolicyMisuse,
    QuotaExhausted,
    SettingsError,
)


def user_errors(func: F) -> F:
    """Turn what the package raises on purpose (bad data, settings that do not go together, a run made
    otherwise, an account without quota, an endpoint that cannot be used, a model that refuses every request),
    a file that cannot be read or written, and Ctrl-C or SIGTERM into one line and a non-zero exit status, never
    a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with sigterm_as_ctrl_c():
                return func(*args, **kwargs)
        except ValidationError as exc:
            said = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors(include_url=False))
            raise click.UsageError(in_flags(said)) from None
        except SettingsError as exc:
            raise click.UsageError(in_flags(str(exc))) from None
        except (QuotaExhausted, PolicyMisuse, EndpointUnusable) as exc:
            raise click.ClickException(in_flags(f"stopped, {exc}")) from None
        except Interrupted as exc:
            stopped(str(exc), exc.signal == "SIGTERM")
        except HealthBenchError as exc:
            raise click.ClickException(in_flags(str(exc))) from None
        except OSError as exc:
            raise click.ClickException(os_error(exc)) from None
        except KeyboardInterrupt as exc:
            how = "stopped by SIGTERM" if isinstance(exc, Terminated) else "interrupted"
            stopped(f"{how}; a run keeps every answer that arrived in its store", isinstance(exc, Terminated))

    return wrapper  # type: ignore[return-value]


def os_error(exc: OSError) -> str:
    """A file or folder that cannot be used, in one line naming it: "cannot use /proc/nope: No such file"."""
    where = " -> ".join(str(name) for name in (exc.filename, exc.filename2) if name is not None)
    reason = exc.strerror or str(exc)
    return f"cannot use {where}: {reason}" if where else reason
