"""What requests and answers say about rate limits: a request's token cost, and what a 429 means.

OpenAI counts a request against its tokens-per-minute limit on arrival, as its prompt plus its output cap;
its 429s name the limit that refused (with its size and when to try again) or say that the account has no
quota left. `pacing.Pacer` acts on these; this module only reads them.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from healthbench.errors import ProviderError

DEFAULT_OUTPUT_CAP = 4096
"""The output cap a request without one is counted at (a provider counts the model's own default)."""

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


def duration_seconds(text: str) -> float | None:
    """Parse OpenAI's rate-limit durations such as "1s", "6m0s", "500ms" or "0.5"."""
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    index = 0
    while index < len(text):
        char = text[index]
        if char.isdigit() or char == ".":
            number += char
            index += 1
            continue
        unit = "ms" if text.startswith("ms", index) else char
        if unit not in units or not number:
            return None
        total += float(number) * units[unit]
        number, index = "", index + len(unit)
    return total + float(number) if number else total


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait, from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None


def _chars(value: Any) -> tuple[int, int]:
    """Characters of text in a prompt (messages, Responses input), and how many items hold them."""
    if isinstance(value, str):
        return len(value), 1
    if isinstance(value, list):
        sizes = [_chars(item) for item in value]
        return sum(size for size, _ in sizes), sum(items for _, items in sizes)
    if isinstance(value, dict):
        return sum(_chars(value.get(key))[0] for key in ("content", "text")), 1
    return 0, 0


def request_cost(body: Mapping[str, Any], default_cap: int = DEFAULT_OUTPUT_CAP) -> int:
    """The tokens a request counts against a TPM limit, as OpenAI estimates them on arrival: its prompt (four
    characters a token, and a few for each message) plus its output cap, or `default_cap` if it sets none."""
    chars, items = 0, 0
    for key in ("messages", "input", "instructions"):
        size, count = _chars(body.get(key))
        chars, items = chars + size, items + count
    caps = [body.get(key) for key in ("max_tokens", "max_completion_tokens", "max_output_tokens")]
    cap = next((value for value in caps if isinstance(value, int) and not isinstance(value, bool)), default_cap)
    return math.ceil(chars / 4) + 4 * items + cap


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
    code, message = error.code, error.message
    if code == "insufficient_quota":
        return RateLimited(quota=True)
    retry_after = retry_after_seconds(headers)
    again = _TRY_AGAIN.search(message)
    if retry_after is None and again:
        retry_after = duration_seconds(again.group(1))
    hinted = again is not None or headers.get("retry-after-ms") is not None
    numbers = _LIMIT_MESSAGE.search(message)
    if numbers is None:
        return RateLimited(retry_after=retry_after, hinted=hinted)
    dimension: Dimension = "requests" if numbers.group(1).lower() == "requests" else "tokens"
    requested = _number(numbers.group(4))
    return RateLimited(
        False, retry_after, dimension, _number(numbers.group(2)), None if requested is None else math.ceil(requested),
        hinted,
    )  # fmt: skip


def _number(text: str | None) -> float | None:
    return None if text is None else float(text.replace(",", ""))


def header_number(value: str | None) -> float | None:
    """A numeric header's value; None if absent or not a number."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
