"""Judge hosts as their documentation describes them, played by the fake: what servers other than OpenAI's do with
the same requests (``FakeOpenAI(judge_host=Host(...))``, ``python -m healthbench.testing --think block ...``).

- ``think``: a reasoning model's thinking before its verdict, as vLLM, SGLang, Ollama and llama.cpp's server give
  it. ``block``: in the answer, ``<think>...</think>`` first (no reasoning parser); ``closing``: the same, opened by
  the chat template in the prompt, so only ``</think>`` is in the answer (DeepSeek-R1's distills); and in a field
  of its own beside the answer, ``reasoning_content`` (vLLM's and SGLang's parsers) or ``reasoning`` (later vLLM,
  Ollama, OpenRouter). The thinking is ``thinking_tokens`` long; a request whose output cap (``max_tokens`` or
  ``max_completion_tokens``) it does not leave room for the verdict under ends inside it, with ``finish_reason``
  "length": an unclosed block, or an empty answer beside the thinking field. Only grader requests think: a policy's
  reply stays the plain fake's, so verdicts can be compared with its.
- ``refuses``: request parameters the host does not know and refuses with Azure OpenAI's 400, "Unrecognized request
  argument supplied: NAME" (no ``param``, no ``code``).
- ``usage``: False leaves ``usage`` out of every answer, as some servers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from healthbench.errors import SettingsError
from healthbench.testing.replies import Body, error_body, estimate_tokens

__all__ = ["THINKING", "Host", "ThinkMode"]

ThinkMode = Literal["block", "closing", "reasoning_content", "reasoning"]
THINKING: tuple[ThinkMode, ...] = ("block", "closing", "reasoning_content", "reasoning")
_THOUGHT = "Okay, the rubric item asks for something specific; let me check the response against it carefully. "


@dataclass(frozen=True)
class Host:
    """How the fake's host departs from OpenAI's API; see the module's docstring."""

    think: ThinkMode | None = None
    thinking_tokens: int = 300
    refuses: tuple[str, ...] = ()
    usage: bool = True

    def __post_init__(self) -> None:
        if self.think is not None and self.think not in THINKING:
            raise SettingsError(f"unknown think mode {self.think!r}; choose from {THINKING}")
        if self.thinking_tokens < 1:
            raise SettingsError("thinking_tokens must be positive")

    def refusal(self, body: Body) -> Body | None:
        """The error object of the 400 this host answers ``body`` with, if it carries a parameter it refuses."""
        for name in self.refuses:
            if name in body:
                return error_body(f"Unrecognized request argument supplied: {name}", "invalid_request_error")
        return None

    def answer(self, payload: Body, body: Body, grader: bool) -> Body:
        """A chat completion ``payload`` as this host gives it, for the request ``body`` (a grader's or not)."""
        choices = payload.get("choices")
        if self.think is not None and grader and isinstance(choices, list) and choices:
            choices[0] = self._thought(choices[0], body, payload.get("usage"))
        if not self.usage:
            payload.pop("usage", None)
        return payload

    def _thought(self, choice: dict[str, Any], body: Body, usage: Any) -> dict[str, Any]:
        message = dict(choice["message"])
        verdict = message.get("content") or ""
        cap = body.get("max_completion_tokens", body.get("max_tokens"))
        thinking = (_THOUGHT * (1 + self.thinking_tokens * 4 // len(_THOUGHT)))[: self.thinking_tokens * 4]
        cut = isinstance(cap, int) and cap < self.thinking_tokens + estimate_tokens(len(verdict))
        if cut and isinstance(cap, int):
            thinking = thinking[: max(0, cap) * 4]
        if self.think in ("block", "closing"):
            opening = "<think>\n" if self.think == "block" else ""
            message["content"] = opening + thinking if cut else f"{opening}{thinking}\n</think>\n\n{verdict}"
        else:
            message["content"] = None if cut else verdict
            message[str(self.think)] = thinking
        if isinstance(usage, dict):
            # The thinking is output, as every host bills it; hosts with a reasoning field say how much of it.
            spent = estimate_tokens(len(thinking))
            usage["completion_tokens"] = estimate_tokens(0 if cut else len(verdict)) + spent
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            usage["completion_tokens_details"] = {
                "reasoning_tokens": spent if self.think not in ("block", "closing") else 0
            }
        return {**choice, "message": message, "finish_reason": "length" if cut else choice.get("finish_reason")}
