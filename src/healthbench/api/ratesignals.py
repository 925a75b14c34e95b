"""What requests and answers say about rate limits in numbers: a request's token cost, the waits a server asks
for, and a limit header's value.

OpenAI counts a request against its tokens-per-minute limit on arrival, as its prompt plus its output cap. What a
429's body says (which limit refused, or no quota left) is read in `failures` with the rest of a refused request.
`pacing.Pacer` acts on these; this module only reads them.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import Any

DEFAULT_OUTPUT_CAP = 4096
"""The output cap a request without one is counted at (a provider counts the model's own default)."""


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
    cap = output_cap(body)
    return math.ceil(chars / 4) + 4 * items + (default_cap if cap is None else cap)


def output_cap(body: Mapping[str, Any]) -> int | None:
    """A request's output cap, in whichever API's words it sets one; None if it sets none."""
    caps = [body.get(key) for key in ("max_tokens", "max_completion_tokens", "max_output_tokens")]
    return next((value for value in caps if isinstance(value, int) and not isinstance(value, bool)), None)


def header_number(value: str | None) -> float | None:
    """A numeric header's value; None if absent or not a number."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
