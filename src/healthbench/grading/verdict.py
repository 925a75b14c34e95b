"""What a grader's answer says about one rubric item, read as the reference reads it: a JSON object (fenced or
not) whose `criteria_met` is a JSON boolean, with an explanation. Anything else is `InvalidResponse`, which the
client asks again within its retry bound. `per_reply` reads a list of these; `grader` asks for them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from healthbench.api.wire import Usage
from healthbench.errors import InvalidResponse
from healthbench.grading.thinking import after_thinking, still_thinking

NO_EXPLANATION = "No explanation provided"

_FENCE = re.compile(r"^```json\s*|\s*```$")


@dataclass(frozen=True)
class Verdict:
    """The grader's judgement of one rubric item."""

    criteria_met: bool
    explanation: str


def _json(text: str) -> Any:
    """The reference's reading of an answer: a leading "```json" and a trailing "```" stripped, the rest JSON."""
    return json.loads(_FENCE.sub("", text.strip()))


def decode_answer(text: str) -> Any:
    """An answer's JSON as the reference reads it; failing that, what follows the grader's thinking
    (`thinking.after_thinking`), which no answer the reference reads has. `InvalidResponse` for neither."""
    try:
        return _json(text)
    except ValueError:
        pass
    for rest in after_thinking(text):
        try:
            return _json(rest)
        except ValueError:
            continue
    if still_thinking(text):
        raise InvalidResponse("the answer ends inside the grader's thinking (a <think> block never closed)")
    raise InvalidResponse("grader answer is not JSON")


def read_verdict(parsed: Mapping[str, Any], where: str = "") -> Verdict:
    """The verdict of a decoded answer object; `InvalidResponse` unless `criteria_met` is a JSON boolean (`where`
    heads the cause: which item of a list)."""
    met = parsed.get("criteria_met")
    if not isinstance(met, bool):
        raise InvalidResponse(f"{where}criteria_met is {json.dumps(met)[:40]}, not a JSON boolean")
    explanation = parsed.get("explanation", NO_EXPLANATION)
    if not isinstance(explanation, str):
        explanation = json.dumps(explanation)
    return Verdict(met, explanation)


def parse_verdict(text: str) -> Verdict:
    """Parse a grader answer; raise `InvalidResponse` unless `criteria_met` is a JSON boolean."""
    parsed = decode_answer(text)
    if not isinstance(parsed, dict):
        raise InvalidResponse("grader answer is not a JSON object")
    return read_verdict(parsed)


@dataclass(frozen=True)
class Answer:
    """A verdict with what its call cost (`usage`, whenever it was made; a per-reply call's with its first item),
    and whether it came from the cache (`reused`: nothing was paid for it now)."""

    verdict: Verdict
    usage: Usage
    reused: bool = False

    @property
    def paid(self) -> Usage:
        """What asking cost now: nothing for a verdict reused."""
        return Usage() if self.reused else self.usage


class VerdictCache(Protocol):
    """Verdicts remembered by exact grader request, so identical requests are paid for once."""

    def get_verdict(self, key: str) -> tuple[Verdict, Usage] | None:
        """The stored verdict for this request, with what it cost when it was asked, if any."""

    def put_verdict(self, key: str, verdict: Verdict, usage: Usage) -> None:
        """Remember a verdict and what it cost."""
