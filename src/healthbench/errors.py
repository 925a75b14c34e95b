"""Every error the package raises on purpose, under one base class: `except HealthBenchError` catches them all.

Library code raises these and returns values; only the command line turns them into messages and exit
statuses. A provider's error body is parsed here, once, into a `ProviderError` that every reader of a refused
request (the retry table, the rate-limit reader, the policy's refusal rules) takes its fields from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


class HealthBenchError(Exception):
    """The base of every error this package raises on purpose."""


class DataError(HealthBenchError, ValueError):
    """A data file that cannot be used as HealthBench data; the message names file, line and field."""


class DownloadFailed(DataError):
    """An official file that could not be downloaded: what failed (the file, the URL, the cause), and the ways to
    work offline. The data layer names the one every command has (`HEALTHBENCH_DATA_DIR`); a caller that takes a
    data file of its own adds its way with `offering`."""

    def __init__(self, failure: str, ways: tuple[str, ...]) -> None:
        super().__init__(f"{failure}. To work offline, {', or '.join(ways)}.")
        self.failure = failure
        self.ways = ways

    def offering(self, way: str) -> DownloadFailed:
        """The same failure, with one more way to work offline."""
        return DownloadFailed(self.failure, (*self.ways, way))


class UnknownPromptId(DataError):
    """A prompt_id that is not among a split's tasks (a reward asked for a task of another split, or of no data
    at all): the message names the prompt_id and the split."""

    def __init__(self, prompt_id: str, split: str) -> None:
        super().__init__(f"prompt_id {prompt_id!r} is not in split {split!r}")
        self.prompt_id = prompt_id
        self.split = split


class SettingsError(HealthBenchError, ValueError):
    """Settings that cannot go together or cannot be used (a length adjustment given by halves, say)."""


class MissingExtra(HealthBenchError):
    """What was asked needs a package an optional extra installs, and it is not installed: the message names what
    needs it, the package and the extra."""

    def __init__(self, what: str, package: str, extra: str) -> None:
        super().__init__(f"{what} needs {package}, which is not installed: pip install 'healthbench[{extra}]'")
        self.package = package
        self.extra = extra


class ConfigMismatch(HealthBenchError):
    """The output folder holds a run made with other settings."""


class OutputUnusable(HealthBenchError):
    """An output folder, or a file in it, that cannot be made, written or read as a run's: the message names the
    path and the cause ("cannot write /proc/nope: No such file or directory")."""

    def __init__(self, path: object, cause: str) -> None:
        super().__init__(f"cannot write {path}: {cause}")
        self.path = path


# Statuses that say the request is wrong whatever it carries: the key (401), its permissions (403), the URL or the
# model (404, 405).
_REQUEST_STATUSES = frozenset({401, 403, 404, 405})
# Codes about the request rather than the conversation it carries, whatever parameter they name.
_REQUEST_CODES = frozenset(
    {"invalid_api_key", "model_not_found", "unsupported_parameter", "unsupported_value", "unknown_parameter"}
)
# The parameters that carry the conversation (`messages[1].content` among them): a 400 naming any other is about
# the request.
_CONVERSATION_PARAMS = frozenset({"messages", "input", "prompt"})
# What a refusal of the conversation itself says (a content filter, a context too long for the model): codes, or
# phrases of providers that send no code.
_PROMPT_CODES = frozenset(
    {
        "invalid_prompt",
        "content_filter",
        "content_policy_violation",
        "context_length_exceeded",
        "string_above_max_length",
    }
)
_PROMPT_PHRASES = ("content filter", "content management policy", "maximum context length", "prompt is too long")


@dataclass(frozen=True)
class ProviderError:
    """What a provider's error body says: OpenAI's `{"error": {...}}`, vLLM's flat object, FastAPI's
    `{"detail": ...}`, or plain text. Every field may be missing."""

    status: int | None
    code: str | None = None
    type: str | None = None
    param: str | None = None
    message: str = ""

    @classmethod
    def parse(cls, status: int | None, body: bytes) -> ProviderError:
        """Read an error body; a body that is not JSON is its own message."""
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            return cls(status, message=body.decode("utf-8", "replace").strip())
        error = parsed.get("error", parsed) if isinstance(parsed, dict) else {}
        if isinstance(error, str):
            return cls(status, message=error)
        if not isinstance(error, dict):
            return cls(status)
        message = error.get("message") or error.get("detail") or ""

        def text(key: str) -> str | None:
            value = error.get(key)
            return value if isinstance(value, str) else None

        return cls(status, text("code"), text("type"), text("param"), message if isinstance(message, str) else "")

    @property
    def about_request(self) -> bool:
        """Whether the refusal is of the request itself (the key, the URL, the model, a parameter), which no
        retry and no other prompt can change; a refusal of the conversation it carries (a content filter, a
        context too long) is not, nor is a 400 that names no parameter and no known code."""
        if self.status in _REQUEST_STATUSES:
            return True
        if self.status not in (400, 422):
            return False
        if self.code in _REQUEST_CODES:
            return True
        return self.param is not None and not self._names_the_conversation

    @property
    def about_prompt(self) -> bool:
        """Whether the refusal is of the conversation the request carries (OpenAI's `invalid_prompt`, a content
        filter, a context too long for the model): the model's outcome for that prompt, not the caller's mistake."""
        if self.status not in (400, 422) or (self.param is not None and not self._names_the_conversation):
            return False
        return self.code in _PROMPT_CODES or any(phrase in self.message.lower() for phrase in _PROMPT_PHRASES)

    @property
    def _names_the_conversation(self) -> bool:
        return self.param is not None and re.split(r"[.\[]", self.param, maxsplit=1)[0] in _CONVERSATION_PARAMS


class RequestFailed(HealthBenchError):
    """A request that did not succeed within the retry bound, or failed in a way not worth retrying."""

    def __init__(self, cause: str, attempts: int, *, status: int | None = None, body: bytes = b"") -> None:
        super().__init__(f"{cause} (after {attempts} attempt{'s' if attempts != 1 else ''})")
        self.cause = cause
        self.attempts = attempts
        # The HTTP status and whole body of a refused request, and the body read as the provider's error.
        self.status = status
        self.body = body
        self.error = ProviderError.parse(status, body) if status is not None else None


class InvalidResponse(HealthBenchError):
    """An answer arrived but cannot be used (broken body, empty content, no valid verdict): retried."""


class UnreadableAnswer(InvalidResponse):
    """An answer that is not the API's at all (not JSON, no choices, an HTML page, `{}`), as opposed to a readable
    one whose content cannot be used: an endpoint none of whose first answers can be read is unusable."""


class QuotaExhausted(HealthBenchError):
    """The account has no quota (credit) left, as a 429 with code `insufficient_quota` says: retrying cannot help."""


class EndpointUnusable(HealthBenchError):
    """An endpoint no waiting can make usable: it cannot be reached (connection refused, no such host), its URL is
    not one, or it refuses the requests themselves (`refused`: a 401 or 403, a 404, a 400 about a parameter or the
    model). Never retried: the run stops. The message names the endpoint (without a password) and the cause, never
    the key; `role` says whose endpoint it is ("the model's", "the grader's") once a caller knows, and `advice`
    what to do, once the run knows where its answers are kept."""

    def __init__(self, endpoint: str, cause: str, *, refused: bool, role: str = "", advice: str = "") -> None:
        super().__init__(f"{role + ' ' if role else ''}endpoint {endpoint} {cause}{'; ' + advice if advice else ''}")
        self.endpoint = endpoint
        self.cause = cause
        self.refused = refused
        self.role = role
        self.advice = advice

    def of(self, role: str) -> EndpointUnusable:
        """The same error, said of `role`'s endpoint."""
        return EndpointUnusable(self.endpoint, self.cause, refused=self.refused, role=role, advice=self.advice)

    def advised(self, advice: str) -> EndpointUnusable:
        """The same error, with what to do."""
        return EndpointUnusable(self.endpoint, self.cause, refused=self.refused, role=self.role, advice=advice)


class Interrupted(HealthBenchError):
    """The user stopped a run (Ctrl-C, or `signal` SIGTERM: docker stop, systemd, SLURM) after what was in flight
    landed; `done` of `total` samples are graded and kept, with every answer that arrived, so the same command
    goes on from there."""

    def __init__(self, done: int, total: int, store: str, signal: str = "SIGINT") -> None:
        how = "interrupted" if signal == "SIGINT" else f"stopped by {signal}"
        super().__init__(
            f"{how}: {done} of {total} graded and saved, and every answer that arrived is kept in {store}; run the "
            "same command again to go on from there"
        )
        self.done = done
        self.total = total
        self.signal = signal


class PaceStoreUnreachable(HealthBenchError):
    """The store a shared pace was asked to use (`--pace-store`) cannot be reached at start: nothing is sent.
    The URL is named without its password."""

    def __init__(self, url: str, cause: str) -> None:
        super().__init__(f"pace store {url} cannot be reached ({cause}); nothing was sent")
        self.url = url
        self.cause = cause


class Deferred(HealthBenchError):
    """A request left in a batch for a later session to collect (`--no-wait`): neither an answer nor a failure."""


class GradingError(HealthBenchError):
    """A reply that could not be graded: which task, which rubric item, and the last cause."""

    def __init__(self, prompt_id: str, criterion: str, cause: str) -> None:
        short = criterion if len(criterion) <= 100 else criterion[:97] + "..."
        super().__init__(f"task {prompt_id}: rubric item {short!r} could not be graded: {cause}")
        self.prompt_id = prompt_id
        self.criterion = criterion
        self.cause = cause


class ReplyGradingError(GradingError):
    """A reply whose rubric, asked in one grader call (`per-reply`), got no valid list of verdicts: which task, how
    many items, and the last cause. There is no verdict for any of its items."""

    def __init__(self, prompt_id: str, items: int, cause: str) -> None:
        HealthBenchError.__init__(
            self,
            f"task {prompt_id}: its {items} rubric items, asked in one grader call (per-reply), could not be graded: "
            f"{cause}",
        )
        self.prompt_id = prompt_id
        self.criterion = f"all {items} rubric items (per-reply)"
        self.cause = cause
        self.items = items


class CandidateError(HealthBenchError):
    """A candidate of a group (OpenReward's `score_group`) that cannot be scored: it has no reply, or its reply
    could not be graded. The message names the candidate's index."""

    def __init__(self, index: int, cause: str) -> None:
        super().__init__(f"candidate {index}: {cause}")
        self.index = index


class OverLimit(HealthBenchError):
    """A request to a served environment that asks more than the server's bounds allow (a reply too long to
    grade, a group of too many candidates): nothing of it was graded. The message names the bound and the flag
    that sets it."""


class SessionRefused(HealthBenchError):
    """A request a served session refuses for its state: a group scored after the session's episode finished."""


class SampleError(HealthBenchError):
    """The evaluated model gave no usable reply for a task within the retry bound."""

    def __init__(self, prompt_id: str, cause: str) -> None:
        super().__init__(f"task {prompt_id}: the model under evaluation gave no reply: {cause}")
        self.prompt_id = prompt_id


class PolicyMisuse(HealthBenchError):
    """The model's endpoint refuses the requests themselves, not a few prompts: no score can come of it."""


class MetaGradingError(HealthBenchError):
    """A meta-eval row the grader could not judge within the retry bound."""

    def __init__(self, index: int, prompt_id: str, completion_id: str, rubric: str, cause: str) -> None:
        shown = rubric if len(rubric) <= 80 else rubric[:77] + "..."
        super().__init__(
            f"meta-eval row {index} (prompt {prompt_id}, completion {completion_id}, criterion {shown!r}) could "
            f"not be graded: {cause}"
        )
