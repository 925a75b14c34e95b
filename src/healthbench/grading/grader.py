"""Grading one reply against its rubric, item by item, exactly as OpenAI's reference does.

Every rubric item gets a grader call of its own. A verdict is valid only when `criteria_met` is a JSON boolean;
anything else is asked again within the client's retry bound, and an item that never gets a valid verdict makes
the whole reply fail with `GradingError`. No partial score is ever produced.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from healthbench.api.client import Completer
from healthbench.api.wire import Shape, Usage, request_key
from healthbench.data.schema import Message, RubricItem
from healthbench.errors import GradingError, InvalidResponse, RequestFailed
from healthbench.grading.prompt import GRADER_SYSTEM_MESSAGE, grader_prompt, render_conversation, rubric_item_text

DEFAULT_GRADER_MODEL = "gpt-4.1-2025-04-14"
GRADER_TEMPERATURE = 0.5
GRADER_MAX_TOKENS = 2048
# What the reference sends gpt-4.1: Chat Completions, temperature 0.5, max_tokens 2048.
REFERENCE_SHAPE = Shape(api="chat", temperature=GRADER_TEMPERATURE, max_output_tokens=GRADER_MAX_TOKENS)
NO_EXPLANATION = "No explanation provided"

_FENCE = re.compile(r"^```json\s*|\s*```$")


@dataclass(frozen=True)
class Verdict:
    """The grader's judgement of one rubric item."""

    criteria_met: bool
    explanation: str


def parse_verdict(text: str) -> Verdict:
    """Parse a grader answer; raise `InvalidResponse` unless `criteria_met` is a JSON boolean."""
    try:
        parsed: Any = json.loads(_FENCE.sub("", text.strip()))
    except ValueError:
        raise InvalidResponse("grader answer is not JSON") from None
    if not isinstance(parsed, dict):
        raise InvalidResponse("grader answer is not a JSON object")
    met = parsed.get("criteria_met")
    if not isinstance(met, bool):
        raise InvalidResponse(f"criteria_met is {json.dumps(met)[:40]}, not a JSON boolean")
    explanation = parsed.get("explanation", NO_EXPLANATION)
    if not isinstance(explanation, str):
        explanation = json.dumps(explanation)
    return Verdict(met, explanation)


@dataclass(frozen=True)
class GradedItem:
    """A rubric item with the grader's verdict."""

    criterion: str
    points: int
    tags: list[str]
    criteria_met: bool
    explanation: str

    def as_dict(self) -> dict[str, Any]:
        """The item as results.jsonl records it."""
        return {
            "criterion": self.criterion,
            "points": self.points,
            "tags": self.tags,
            "criteria_met": self.criteria_met,
            "explanation": self.explanation,
        }


@dataclass
class GradedReply:
    """Every rubric item of one task graded, with the tokens the grader spent."""

    prompt_id: str
    items: list[GradedItem]
    usage: Usage = field(default_factory=Usage)


class VerdictCache(Protocol):
    """Verdicts remembered by exact grader request, so identical requests are paid for once."""

    def get_verdict(self, key: str) -> Verdict | None:
        """The stored verdict for this request, if any."""

    def put_verdict(self, key: str, verdict: Verdict, usage: Usage) -> None:
        """Remember a verdict and what it cost."""


class Grader:
    """Grades replies with an LLM grader through a `Completer` (live or batched), optionally through a verdict
    cache.

    `shape` says how the grader model is asked (the reference's chat request by default; a reasoning model
    through Chat Completions or the Responses API); `system_message` whether the reference's system message
    "You are a helpful assistant." goes first (as a `developer` message in the Responses API). The client
    must be one of the shape's API.
    """

    def __init__(
        self,
        client: Completer,
        model: str = DEFAULT_GRADER_MODEL,
        *,
        shape: Shape = REFERENCE_SHAPE,
        system_message: bool = True,
        cache: VerdictCache | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.shape = shape
        self.system_message = system_message
        self.cache = cache

    def request_body(self, prompt: str) -> dict[str, Any]:
        """The request body for one grader prompt; with the defaults, what the reference sampler sends."""
        head = [{"role": "system", "content": GRADER_SYSTEM_MESSAGE}] if self.system_message else []
        return self.shape.body(self.model, [*head, {"role": "user", "content": prompt}])

    async def verdict(self, prompt: str, *, ident: str | None = None) -> tuple[Verdict, Usage]:
        """One grader call for a rendered grader prompt; raises `RequestFailed` past the retry bound.

        `ident` names the (sample, rubric item) the call is for: the reference grades every item of every
        sample with a call of its own, so identical requests of different items are not one verdict. With
        a cache, the request and its `ident` are the key, and a hit costs nothing and reports zero usage.
        """
        # Encoded once: the same bytes are sent and are part of the cache key.
        payload = json.dumps(self.request_body(prompt)).encode()
        if self.cache is None:
            return await self.client.complete(payload, parse_verdict, ident=ident)
        key = request_key(payload if ident is None else payload + b"\0" + ident.encode())
        cached = self.cache.get_verdict(key)
        if cached is not None:
            return cached, Usage()
        verdict, usage = await self.client.complete(payload, parse_verdict, ident=ident)
        self.cache.put_verdict(key, verdict, usage)
        return verdict, usage

    async def grade(
        self, prompt_id: str, transcript: Sequence[Message], rubrics: Sequence[RubricItem], *, ident: str | None = None
    ) -> GradedReply:
        """Grade the last assistant turn of `transcript` against every rubric item, concurrently; `ident`
        names the sample, for the verdicts of its items to be kept apart from other samples'.

        The first item that cannot be graded cancels the others and raises `GradingError`.
        """
        conversation = render_conversation(transcript)

        async def one(index: int, item: RubricItem) -> tuple[Verdict, Usage]:
            item_ident = None if ident is None else f"{ident}/{index}"
            try:
                return await self.verdict(grader_prompt(conversation, rubric_item_text(item)), ident=item_ident)
            except RequestFailed as exc:
                raise GradingError(prompt_id, item.criterion, str(exc)) from None

        tasks = [asyncio.ensure_future(one(index, item)) for index, item in enumerate(rubrics)]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        usage = Usage()
        items = []
        for item, (verdict, item_usage) in zip(rubrics, results, strict=True):
            usage.add(item_usage)
            items.append(
                GradedItem(item.criterion, item.points, list(item.tags), verdict.criteria_met, verdict.explanation)
            )
        return GradedReply(prompt_id, items, usage)
