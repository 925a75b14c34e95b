"""What a failed request says, read once, for the retry table, the pace, the policy's refusal rules and the one
line that stops a run: the provider's error body (`ProviderError`), what kind of failure an answer other than 200
or a transport error is, what a 429 says about the key's limits, why a connection could not be made, what a
refused request was told, why an answer the output cap ended cannot be used, and the endpoint as it may be shown
(without a password, never with a key). No Python class name reaches a message.

`retrying` decides what each kind of failure leads to; this module only reads them.
"""

from __future__ import annotations

import json
import math
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from yarl import URL

from healthbench.api.ratesignals import duration_seconds, retry_after_seconds
from healthbench.api.retrying import Failure, Kind, is_retryable
from healthbench.api.wire import Reading
from healthbench.errors import InvalidResponse, RequestFailed

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

        return cls(
            status,
            code=text("code"),
            type=text("type"),
            param=text("param"),
            message=message if isinstance(message, str) else "",
        )

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


def provider_error(failure: RequestFailed) -> ProviderError | None:
    """What the provider said with a refused request (a call that ran out of attempts was refused by no one)."""
    return None if failure.status is None else ProviderError.parse(failure.status, failure.body)


_NAME = r"([A-Za-z_][A-Za-z0-9_.]*)"
# How hosts say that a request carries a parameter they do not take (see `hosts`' docstring), the name caught.
_REFUSALS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        rf"unrecognized request argument supplied:\s*{_NAME}",
        rf"(?:unsupported|unknown|unrecognized) (?:parameter|argument|field)s?:\s*'{_NAME}'",
        rf"(?:parameter|property|argument|field) '{_NAME}' is (?:unsupported|not supported|not allowed|not permitted)",
        rf"unknown field `{_NAME}`",
        rf"#/{_NAME}: extra inputs are not permitted",
        rf'"extra_forbidden",\s*"loc":\s*\[\s*"body",\s*"{_NAME}"\s*\]',
        rf'"loc":\s*\[\s*"body",\s*"{_NAME}"\s*\],\s*"msg":\s*"extra inputs are not permitted"',
        rf"does not support (?:the )?parameter:?\s*'?{_NAME}",
    )
)
# OpenAI's codes for a parameter the model does not take (its `param` names it); a refused value is another code.
_PARAMETER_CODES = frozenset({"unsupported_parameter", "unknown_parameter", "unrecognized_parameter"})


def refused_parameter(status: int | None, body: bytes) -> str | None:
    """The top-level request parameter that a refusal (`status`, `body`) says the host does not take, as the request
    spells it; None for any other answer (a refused value among them: "Unsupported value: 'temperature' ...")."""
    if status is None or not 400 <= status < 500 or status == 429:
        return None
    text = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    error = parsed.get("error", parsed) if isinstance(parsed, dict) else None
    if isinstance(error, dict) and error.get("code") in _PARAMETER_CODES and isinstance(error.get("param"), str):
        return str(error["param"])
    # A message may hold an escaped JSON document of its own (Mistral's): read it unescaped.
    text = text.replace('\\"', '"')
    for pattern in _REFUSALS:
        if (found := pattern.search(text)) is not None:
            return found[1]
    return None


def excerpt(body: bytes) -> str:
    """The first 200 characters of a body, on one line."""
    return " ".join(body[:200].decode("utf-8", "replace").split())


def status_failure(status: int, body: bytes, headers: Mapping[str, str]) -> Failure:
    """An answer other than 200 as a failure of its kind, with its `Retry-After`, `x-request-id` and
    `x-should-retry`."""
    hint = headers.get("x-should-retry")
    if status == 429:
        kind = Kind.RATE_LIMITED
    elif is_retryable(status):
        kind = Kind.SERVER_ERROR
    elif ProviderError.parse(status, body).about_request or refused_parameter(status, body) is not None:
        kind = Kind.REFUSED_REQUEST
    else:
        kind = Kind.REFUSED
    said = excerpt(body)
    return Failure(
        kind,
        f"HTTP {status}: {said}" if said else f"HTTP {status} with an empty body",
        status=status,
        body=body,
        retry_after=retry_after_seconds(headers),
        request_id=headers.get("x-request-id"),
        should_retry={"true": True, "false": False}.get(hint.lower()) if hint else None,
    )


Dimension = Literal["requests", "tokens"]
# OpenAI's words, read leniently: limiters that imitate them write the numbers with decimals or separators, and
# may leave out what was used or requested.
_NUMBER = r"(\d+(?:,\d{3})*(?:\.\d+)?)"
_LIMIT_MESSAGE = re.compile(
    rf"on (requests|tokens) per min[^:]*:\s*Limit:?\s*{_NUMBER}"
    rf"(?:,\s*Used:?\s*{_NUMBER})?(?:,\s*Requested:?\s*{_NUMBER})?",
    re.IGNORECASE,
)
_TRY_AGAIN = re.compile(r"try again in ((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)", re.IGNORECASE)


@dataclass(frozen=True)
class RateLimited:
    """What a 429 says: no quota left, or which limit refused, its per-minute size, and when to try again."""

    quota: bool = False
    retry_after: float | None = None
    dimension: Dimension | None = None
    limit: float | None = None
    requested: int | None = None
    # A limiter's own hint on when its bucket has room (`retry-after-ms`, or "try again in" in its message), not
    # a gateway's bare `Retry-After`: the refusal is a limit's even when it names neither the limit nor its size.
    hinted: bool = False


def read_refusal(body: bytes, headers: Mapping[str, str]) -> RateLimited:
    """Read a 429: its error code, the numbers in OpenAI's message, and its retry time."""
    error = ProviderError.parse(429, body)
    if error.code == "insufficient_quota":
        return RateLimited(quota=True)
    retry_after = retry_after_seconds(headers)
    again = _TRY_AGAIN.search(error.message)
    if retry_after is None and again:
        retry_after = duration_seconds(again.group(1))
    hinted = again is not None or headers.get("retry-after-ms") is not None
    numbers = _LIMIT_MESSAGE.search(error.message)
    if numbers is None:
        return RateLimited(retry_after=retry_after, hinted=hinted)
    dimension: Dimension = "requests" if numbers.group(1).lower() == "requests" else "tokens"
    requested = _number(numbers.group(4))
    return RateLimited(
        quota=False,
        retry_after=retry_after,
        dimension=dimension,
        limit=_number(numbers.group(2)),
        requested=None if requested is None else math.ceil(requested),
        hinted=hinted,
    )


def _number(text: str | None) -> float | None:
    return None if text is None else float(text.replace(",", ""))


# What aiohttp raises for a URL it cannot send to (a scheme other than http and https has its own error from 3.10).
BAD_URL = tuple(getattr(aiohttp, name) for name in ("InvalidURL", "NonHttpUrlClientError") if hasattr(aiohttp, name))
# What it raises when no connection is made within the connect timeout (its own class from 3.10).
_CONNECT_TIMEOUT = tuple(getattr(aiohttp, name) for name in ("ConnectionTimeoutError",) if hasattr(aiohttp, name))
# What a transport failure can be: aiohttp's errors, and a timeout (a plain TimeoutError past the total).
TRANSPORT = (aiohttp.ClientError, TimeoutError)


# What a resolver answers for a name that does not exist (as opposed to one it could not look up just now).
_NO_SUCH_NAME = frozenset({socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)})


def no_such_host(exc: aiohttp.ClientConnectorError) -> bool:
    """Whether the endpoint's host name does not exist, as its resolver says for certain."""
    return isinstance(exc.os_error, socket.gaierror) and exc.os_error.errno in _NO_SUCH_NAME


def unreachable(exc: aiohttp.ClientConnectorError) -> str:
    """Why a connection could not be made, in words: refused, no such host, a failed TLS handshake."""
    error = exc.os_error
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"its TLS certificate is not trusted: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return f"the TLS handshake failed ({error}); is it http:// rather than https://?"
    if no_such_host(exc):
        return f"no such host: {exc.host}"
    if isinstance(error, socket.gaierror):
        return f"the name {exc.host} could not be resolved: {error.strerror or error}"
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused at {exc.host}:{exc.port}"
    return f"cannot connect to {exc.host}:{exc.port}: {error.strerror or error}"


def transport_failure(
    exc: aiohttp.ClientError | TimeoutError, timeout: float, connect: float, endpoint: str
) -> Failure:
    """A transport error as a failure of its kind, in words: an attempt gets no answer within `timeout` seconds,
    and no connection within `connect`, from `endpoint` (as it may be shown)."""
    if isinstance(exc, BAD_URL):
        return Failure(Kind.NOT_A_URL, "is not a URL (it needs http:// or https://, then a host)")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Failure(Kind.NO_SUCH_HOST if no_such_host(exc) else Kind.UNREACHABLE, unreachable(exc))
    if isinstance(exc, _CONNECT_TIMEOUT):
        return Failure(Kind.UNREACHABLE, f"no connection within {connect:g} s")
    if isinstance(exc, TimeoutError):
        return Failure(Kind.NO_ANSWER, f"no answer within {timeout:g} s", where=f" from {endpoint}")
    detail = " ".join(str(exc).split())
    cause = "the connection closed before the answer was complete" + (f": {detail}" if detail else "")
    return Failure(Kind.DROPPED, cause)


def cut_short(reading: Reading, exc: InvalidResponse) -> str:
    """Why an answer the output cap ended cannot be used, in words: the cap ran out while the model was thinking
    (its thinking in a field of its own and no answer, or an unclosed think block: `exc` says), or mid-answer."""
    if not reading.content.strip() and reading.reasoning:
        why = f"it was still thinking ({len(reading.reasoning):,} characters in its reasoning field) and gave no answer"
    else:
        why = str(exc)
    return f"the output cap ran out before the answer could be used (finish_reason length): {why}"


def said(status: int | None, error: ProviderError | None, cause: str) -> str:
    """What a refusal said in one line: its status, the provider's code and message (else `cause`)."""
    code = f" {error.code}" if error is not None and error.code else ""
    if error is None or not error.message:
        if cause.startswith(f"HTTP {status}"):  # the cause says the status already (`status_failure`)
            return cause
        message = cause
    else:
        message = error.message
    message = message if len(message) <= 300 else message[:297] + "..."
    return f"HTTP {status}{code}: {message}"


def shown(url: str) -> str:
    """A URL as it may be shown: without a user or password."""
    try:
        parsed = URL(url)
    except ValueError:
        return url
    return str(parsed.with_user(None)) if parsed.user or parsed.password else url
