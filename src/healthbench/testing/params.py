"""OpenAI's parameter rules for reasoning models, and the reasoning tokens they spend.

OpenAI answers 400 to a request its model cannot honour (a temperature sent to o3, ``max_tokens``
sent to gpt-5, Chat Completions keys sent to /responses); a client that only ever met a lenient
fake would learn that on its first real run. Each rule returns OpenAI's error object, or None.
"""

from __future__ import annotations

import json
import re
from typing import Any

from healthbench.testing.replies import Body

__all__ = [
    "REASONING_EFFORTS",
    "chat_refusal",
    "is_reasoning_model",
    "reasoning_tokens",
    "responses_refusal",
]

_REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")
REASONING_EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh")
# Deterministic, so a test can predict usage; "none" and "xhigh" (gpt-5.1 and later) extend the scale.
_REASONING_TOKENS = {"none": 0, "minimal": 0, "low": 16, "medium": 64, "high": 256, "xhigh": 1024}
_DEFAULT_EFFORT = "medium"
# Keys only Chat Completions takes, in the order they are reported.
_CHAT_ONLY_KEYS = (
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "response_format",
    "n",
    "stop",
)


def is_reasoning_model(model: Any) -> bool:
    """Whether OpenAI treats ``model`` as a reasoning model (o1, o3, o4-mini, gpt-5, gpt-5.4-...)."""
    return isinstance(model, str) and _REASONING_MODEL.match(model) is not None


def reasoning_tokens(model: Any, effort: Any) -> int:
    """The reasoning tokens a request spends: by effort (medium when unset) for reasoning models, else 0."""
    if not is_reasoning_model(model):
        return 0
    return _REASONING_TOKENS.get(effort if isinstance(effort, str) else _DEFAULT_EFFORT, _REASONING_TOKENS["medium"])


def _refusal(message: str, param: str, code: str) -> Body:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


def _unsupported_parameter(param: str, detail: str = " is not supported with this model.") -> Body:
    return _refusal(f"Unsupported parameter: '{param}'{detail}", param, "unsupported_parameter")


def _temperature_refusal(body: Body) -> Body | None:
    temperature = body.get("temperature")
    if temperature is None or temperature == 1:
        return None
    message = (
        f"Unsupported value: 'temperature' does not support {json.dumps(temperature)} with this model. "
        "Only the default (1) value is supported."
    )
    return _refusal(message, "temperature", "unsupported_value")


def _effort_refusal(effort: Any, param: str) -> Body | None:
    if effort is None or effort in REASONING_EFFORTS:
        return None
    supported = ", ".join(f"'{e}'" for e in REASONING_EFFORTS[:-1]) + f", and '{REASONING_EFFORTS[-1]}'"
    message = f"Unsupported value: '{param}' does not support {json.dumps(effort)} with this model. "
    return _refusal(message + f"Supported values are: {supported}.", param, "unsupported_value")


def chat_refusal(body: Body) -> Body | None:
    """The error OpenAI's Chat Completions answers ``body`` with, or None if it takes it."""
    if not is_reasoning_model(body.get("model")):
        if body.get("reasoning_effort") is not None:
            return _unsupported_parameter("reasoning_effort")
        return None
    if (refusal := _temperature_refusal(body)) is not None:
        return refusal
    if body.get("max_tokens") is not None:
        return _unsupported_parameter(
            "max_tokens", " is not supported with this model. Use 'max_completion_tokens' instead."
        )
    return _effort_refusal(body.get("reasoning_effort"), "reasoning_effort")


def responses_refusal(body: Body) -> Body | None:
    """The error OpenAI's Responses API answers ``body`` with, or None if it takes it."""
    for key in _CHAT_ONLY_KEYS:
        if key in body:
            moved = " In the Responses API, this parameter has moved to 'input'." if key == "messages" else ""
            return _unsupported_parameter(key, "." + moved)
    reasoning = body.get("reasoning")
    if not is_reasoning_model(body.get("model")):
        if reasoning is not None:
            return _unsupported_parameter("reasoning.effort")
        return None
    if (refusal := _temperature_refusal(body)) is not None:
        return refusal
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    return _effort_refusal(effort, "reasoning.effort")
