"""The server's log, readable by a person: one line per session created, per reward, per failure; no traceback
unless `healthbench serve --log-level debug`; never the whole of a request, a full session id, a key or a token.

The SDK logs through module-level structlog loggers (its server, its environments, its sessions). Each is wrapped
here, as is this package's own, so that every line:

- carries at most a bounded excerpt of anything a client sent: every string of a line, its fields and the
  request's context the SDK adds (path, session id, user headers), is cut to `FIELD_CHARS` characters and folded
  onto one line, and a list or mapping to `FIELD_ITEMS` items;
- shows a session id shortened (`guard.short_id`);
- never shows a secret the server holds (its tokens, its grader keys): they are replaced by `[redacted]`;
- logs an exception as one line naming its type and message (a validation error by the fields it names, not
  the input it quotes), and its traceback only at debug level.

The SDK's per-request lines (a request handled, a tool call started or completed, a session set up or deleted)
are said at debug level: at info, a session is one `session_created` line, a reward one `reward` line (or
`group_scored` for a group), a failure one line naming its cause.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Mapping
from typing import Any, ClassVar

import openreward.environments.environment as sdk_environment
import openreward.environments.server as sdk_server
import openreward.environments.session as sdk_session
import structlog
from fastapi.exceptions import RequestValidationError
from openreward.log_utils import get_logger
from starlette.exceptions import HTTPException as StarletteHTTPException

from healthbench.integrations.openreward.guard import short_id

FIELD_CHARS = 300
FIELD_ITEMS = 32
# A traceback's lines, at debug level, each cut to `FIELD_CHARS`: a message quoting a request stays an excerpt.
TRACEBACK_LINES = 200
REDACTED = "[redacted]"
# The SDK's lines that say what every request does: debug, so info is the sessions, rewards and failures.
SDK_ROUTINE = frozenset(
    {
        "request_handled",
        "tool_call_started",
        "tool_call_completed",
        "score_group_started",
        "setup_completed",
        "session_created",  # the environment's own line says it, with the task
        "session_deleted",
    }
)
LEVELS = {name: getattr(logging, name.upper()) for name in ("debug", "info", "warning", "error", "critical")}


class ServerLog:
    """A structlog logger whose lines are kept short, one line, and free of secrets (see the module docstring).
    `routine`: the events said at debug level whatever level they are logged at."""

    tracebacks: ClassVar[bool] = False  # set by `serve`: its log level is debug
    secrets: ClassVar[tuple[str, ...]] = ()  # set by `serve`: its tokens and grader keys

    def __init__(self, inner: Any, routine: frozenset[str] = frozenset()) -> None:
        self.inner = inner
        self.routine = routine

    def _say(self, level: str, event: str, fields: Mapping[str, Any], exception: str | None = None) -> Any:
        if level == "info" and event in self.routine:
            level = "debug"
        enabled = getattr(self.inner, "is_enabled_for", None)
        if enabled is not None and not enabled(LEVELS[level]):
            return None  # a line the level drops: not worth making
        # The request's context, which the SDK binds (a full session id, client headers), is given here shortened:
        # a field given explicitly is the one the line shows.
        merged = {**structlog.contextvars.get_contextvars(), **fields}
        said = {name: bounded(value, self.secrets) for name, value in merged.items()}
        if isinstance(session := merged.get("session_id"), str):
            said["session_id"] = short_id(clean(session, self.secrets))
        if exception is not None:
            said["exception"] = exception
        return getattr(self.inner, level)(clean(event, self.secrets), **said)

    def debug(self, event: str, **fields: Any) -> Any:
        """Said at debug level."""
        return self._say("debug", event, fields)

    def info(self, event: str, **fields: Any) -> Any:
        """Said at info level (debug for a routine event)."""
        return self._say("info", event, fields)

    def warning(self, event: str, **fields: Any) -> Any:
        """Said at warning level."""
        return self._say("warning", event, fields)

    warn = warning

    def error(self, event: str, **fields: Any) -> Any:
        """Said at error level."""
        return self._say("error", event, fields)

    def critical(self, event: str, **fields: Any) -> Any:
        """Said at critical level."""
        return self._say("critical", event, fields)

    def exception(self, event: str, **fields: Any) -> Any:
        """`event` at error level (warning for a request the server could not read), with the exception being
        handled as one line, `error_type` and `error`; at debug level its traceback follows."""
        failure = sys.exc_info()[1]
        if failure is None:
            return self._say("error", event, fields)
        level = "warning" if _clients_fault(failure) else "error"
        said = {**fields, "error_type": type(failure).__name__, "error": failure_text(failure)}
        if not self.tracebacks:
            return self._say(level, event, said)
        lines = "".join(traceback.format_exception(failure)).splitlines()[-TRACEBACK_LINES:]
        return self._say(level, event, said, "\n".join(clean(line, self.secrets, fold=False) for line in lines))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _clients_fault(failure: BaseException) -> bool:
    """Whether `failure` is of a request the server could not read (a body that is not JSON, or not the fields
    a route takes), which is said as a warning."""
    if isinstance(failure, StarletteHTTPException):
        return failure.status_code < 500
    return isinstance(failure, RequestValidationError)


def failure_text(failure: BaseException) -> str:
    """An exception's message for a log line: a validation error's fields and what is wrong with them (never
    the input it quotes), else its message."""
    if isinstance(failure, RequestValidationError):
        problems = [
            f"{'.'.join(str(part) for part in error.get('loc', ()))}: {error.get('msg', '')}"
            for error in list(failure.errors())[:5]
        ]
        return "; ".join(problems) or "the request could not be read"
    return str(failure)


def clean(text: str, secrets: tuple[str, ...], *, fold: bool = True) -> str:
    """`text` without `secrets`, cut to `FIELD_CHARS` characters (saying how long it was), on one line."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    if len(text) > FIELD_CHARS:
        text = f"{text[:FIELD_CHARS]}… ({len(text):,} characters)"
    if fold and not text.isprintable():
        text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text


def bounded(value: Any, secrets: tuple[str, ...]) -> Any:
    """`value` for a log line: strings `clean`, lists and mappings to `FIELD_ITEMS` items (their strings clean)."""
    if isinstance(value, str):
        return clean(value, secrets)
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, Mapping):
        items = list(value.items())
        kept = {clean(str(k), secrets): bounded(v, secrets) for k, v in items[:FIELD_ITEMS]}
        if len(items) > FIELD_ITEMS:
            kept["…"] = f"{len(items) - FIELD_ITEMS} more"
        return kept
    if isinstance(value, list | tuple | set | frozenset):
        listed = list(value)
        kept_list = [bounded(v, secrets) for v in listed[:FIELD_ITEMS]]
        if len(listed) > FIELD_ITEMS:
            kept_list.append(f"… {len(listed) - FIELD_ITEMS} more")
        return kept_list
    return clean(str(value), secrets)


def guard_logs(*, tracebacks: bool, secrets: tuple[str, ...]) -> None:
    """Keep the server's log as the module docstring says from now on: the SDK's loggers wrapped (once), the
    tracebacks shown only if `tracebacks`, `secrets` never shown."""
    ServerLog.tracebacks = tracebacks
    ServerLog.secrets = tuple(secret for secret in secrets if secret)
    for module in (sdk_server, sdk_environment, sdk_session):
        if not isinstance(module.logger, ServerLog):
            module.logger = ServerLog(module.logger, SDK_ROUTINE)
    if not sys.stdout.isatty():
        for log in (sdk_server.logger, sdk_environment.logger, sdk_session.logger, logger):
            plain(log.inner)


def plain(inner: Any) -> None:
    """No colour codes in the lines of a structlog logger: its console renderer's colours off. The SDK makes its
    loggers with colours whether or not its stdout is a terminal, so a log read through a pipe or kept in a file
    carried escape codes. A bound logger holds its processors as `_processors` (structlog has no public reader of
    them); a logger without one, or a renderer without the `colors` setter (structlog before 25.5), is left as is."""
    for processor in getattr(inner, "_processors", ()):
        if isinstance(processor, structlog.dev.ConsoleRenderer) and hasattr(type(processor), "colors"):
            processor.colors = False


logger = ServerLog(get_logger("healthbench.environment"))
