"""How the server logs a reply that cannot be graded: one line naming its task, rubric item and cause, and its
traceback only at debug level (`healthbench serve --log-level debug`).

The SDK logs every tool call that raises with `logger.exception`, a traceback of some 25 lines, whatever the
cause; for a failure this package raises on purpose (a `HealthBenchError`: a rubric item the grader could not
judge, a grader that cannot be reached) the message already says all there is. The SDK's environment logger is
wrapped so that such a failure is logged as one line at error level; anything else, and everything at debug level,
is logged as the SDK logs it. `score_group`'s failures, which the SDK does not log, go through the same wrapper.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

import openreward.environments.environment as sdk_environment
from openreward.log_utils import get_logger

from healthbench.errors import HealthBenchError


class OneLineFailures:
    """A structlog logger whose `exception` logs a `HealthBenchError` being handled as one line (its type and
    message), unless `tracebacks` is set; every other call goes to the logger it wraps."""

    tracebacks: ClassVar[bool] = False  # set by `serve`: its log level is debug

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def exception(self, event: str, **fields: Any) -> Any:
        """`event` at error level: with the traceback of the exception being handled, unless it is a failure of
        this package's own and tracebacks are off."""
        failure = sys.exc_info()[1]
        if isinstance(failure, HealthBenchError) and not self.tracebacks:
            # Whitespace folded: an endpoint's error body in the cause must not break the line.
            message = " ".join(str(failure).split())
            return self.inner.error(event, error_type=type(failure).__name__, error=message, **fields)
        return self.inner.exception(event, **fields)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def one_line_failures(tracebacks: bool) -> None:
    """Log grading failures as one line from now on (with their tracebacks if `tracebacks`), in the SDK's
    environment logger too. Idempotent."""
    OneLineFailures.tracebacks = tracebacks
    if not isinstance(sdk_environment.logger, OneLineFailures):
        sdk_environment.logger = OneLineFailures(sdk_environment.logger)


logger = OneLineFailures(get_logger("healthbench.environment"))
