"""Grading one reply against its rubric, item by item, exactly as OpenAI's reference does.

Every rubric item gets a grader call of its own. A verdict is valid only when `criteria_met` is a JSON boolean;
anything else is asked again within the client's retry bound, and an item that never gets a valid verdict makes
the whole reply fail with `GradingError`. No partial score is ever produced.

Opt-in (`calls="per-reply"`, not the reference's): one call per reply, made and read in `per_reply`, whose answer
must be a JSON list with a valid verdict for every item's id exactly once; any other answer is asked again in the
same way, and past the bound the reply fails as a whole. Each item's verdict is still stored and recorded apart.
What one verdict says is read in `verdict`.

Every request may carry a `prompt_cache_key` (see `prompt.prompt_cache_key`): the same for the requests that
share a prompt's start, so OpenAI routes them to one cache. It is added at the end of the body, so the prompt's
bytes are the reference's; the verdict cache is keyed without it, so a run resumed with it turned on or off
asks nothing again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from healthbench.api.client import Completer
from healthbench.api.wire import Shape, Usage, request_key, with_cache_key
from healthbench.data.schema import Message, RubricItem
from healthbench.errors import GradingError, RequestFailed
from healthbench.grading.per_reply import grade_reply, output_cap
from healthbench.grading.prompt import (
    GRADER_SYSTEM_MESSAGE,
    RUBRIC_PLACEHOLDER,
    SPLICEABLE,
    TEMPLATE_BRIDGE,
    TEMPLATE_HEAD,
    TEMPLATE_TAIL,
    grader_prompt,
    item_prompts,
    prompt_cache_key,
    render_conversation,
    rubric_item_text,
)
from healthbench.grading.verdict import Answer, VerdictCache, parse_verdict
from healthbench.together import together

DEFAULT_GRADER_MODEL = "gpt-4.1-2025-04-14"
GRADER_TEMPERATURE = 0.5
GRADER_MAX_TOKENS = 2048
# What the reference sends gpt-4.1: Chat Completions, temperature 0.5, max_tokens 2048.
REFERENCE_SHAPE = Shape(api="chat", temperature=GRADER_TEMPERATURE, max_output_tokens=GRADER_MAX_TOKENS)
# How the grader is called: once per rubric item (the reference's), or once per reply for all its items (opt-in).
GraderCalls = Literal["per-item", "per-reply"]
GRADER_CALLS: tuple[GraderCalls, ...] = ("per-item", "per-reply")
PER_ITEM: GraderCalls = "per-item"


def _escaped(text: str) -> str:
    """`text` as it stands inside a JSON string that `json.dumps` writes."""
    return json.dumps(text)[1:-1]


# The template's pieces escaped once, for the bytes of item requests (`Grader._item_payloads`).
_HEAD, _BRIDGE, _TAIL = _escaped(TEMPLATE_HEAD), _escaped(TEMPLATE_BRIDGE), _escaped(TEMPLATE_TAIL)
_PROMPT = "\0healthbench grader prompt\0"  # stands in for the prompt in a body, to find where it goes


@dataclass(frozen=True)
class GradedItem:
    """A rubric item with the grader's verdict: what grading returns, and what results.jsonl records for each item
    (`runs.records.SampleRecord.rubric_items`, whose `ItemRecord` is this type), its fields in this order."""

    criterion: str
    points: int
    tags: list[str]
    criteria_met: bool
    explanation: str

    def as_dict(self) -> dict[str, Any]:
        """The item as results.jsonl records it: its fields, in order."""
        return dataclasses.asdict(self)


@dataclass
class GradedReply:
    """Every rubric item of one task graded, with the tokens its verdicts cost (`usage`: the reply's own, a
    verdict reused from the cache counted at what it cost when it was asked) and those this grading paid for
    (`paid`: the calls it made)."""

    prompt_id: str
    items: list[GradedItem]
    usage: Usage = field(default_factory=Usage)
    paid: Usage = field(default_factory=Usage)


@dataclass(eq=False)
class Grader:
    """Grades replies with an LLM grader through a `Completer` (live or batched), optionally through a verdict
    cache.

    `shape` says how the grader model is asked (the reference's chat request by default; a reasoning model
    through Chat Completions or the Responses API); `system_message` whether the reference's system message
    "You are a helpful assistant." goes first (as a `developer` message in the Responses API). The client
    must be one of the shape's API. `calls` is how many calls a reply takes (`per-item`, the reference's, or
    `per-reply`); with `prompt_cache_keys`, every request carries its `prompt_cache_key`. With
    `per_reply_caps`, a per-reply request's output cap grows with its rubric (`per_reply.output_cap`): for a
    shape whose cap is the reference's default rather than one the user gave.
    """

    client: Completer
    model: str = DEFAULT_GRADER_MODEL
    _: KW_ONLY
    shape: Shape = REFERENCE_SHAPE
    system_message: bool = True
    cache: VerdictCache | None = None
    calls: GraderCalls = PER_ITEM
    prompt_cache_keys: bool = True
    per_reply_caps: bool = True

    def request_body(self, prompt: str, *, items: int | None = None) -> dict[str, Any]:
        """The request body for one grader prompt (of `items` rubric items, for a per-reply prompt); with the
        defaults, what the reference sampler sends."""
        head = [{"role": "system", "content": GRADER_SYSTEM_MESSAGE}] if self.system_message else []
        shape = self.shape
        if items is not None and self.per_reply_caps and shape.max_output_tokens is not None:
            shape = dataclasses.replace(shape, max_output_tokens=output_cap(shape.max_output_tokens, items))
        return shape.body(self.model, [*head, {"role": "user", "content": prompt}])

    def cache_key(self, shared: str) -> str | None:
        """The `prompt_cache_key` for requests whose prompts share `shared` (a rendered conversation), or None
        when keys are turned off."""
        return prompt_cache_key(shared) if self.prompt_cache_keys else None

    def affinity(self, shared: str) -> str:
        """What the requests whose prompts share `shared` (a rendered conversation) have in common, for a pool of
        servers to send them to one, whose prefix cache then serves them: the digest their `prompt_cache_key` is,
        sent or not."""
        return prompt_cache_key(shared)

    def request_bytes(self, prompt: str, cache_key: str | None = None, *, items: int | None = None) -> bytes:
        """The exact bytes sent for a grader prompt: its body, then its `prompt_cache_key` when one is given."""
        return self._encoded(prompt, cache_key, items)[1]

    def _encoded(self, prompt: str, cache_key: str | None, items: int | None = None) -> tuple[bytes, bytes]:
        """A request's body as the reference sends it (what verdicts are stored under), and as it is sent."""
        # Encoded once: the same bytes are sent and are part of the cache key.
        payload = json.dumps(self.request_body(prompt, items=items)).encode()
        return payload, payload if cache_key is None else with_cache_key(payload, cache_key)

    def _item_payloads(self, conversation: str) -> Callable[[str], bytes] | None:
        """The request bytes of each rubric item of one reply, as `_encoded` gives them, the conversation escaped
        once for all of them (most of what a request's JSON escapes); None where the reference's substitution
        would not leave the conversation whole (it holds the rubric item's placeholder)."""
        body = json.dumps(self.request_body(_PROMPT))
        before, marker, after = body.partition(json.dumps(_PROMPT))
        if not (SPLICEABLE and marker) or _PROMPT in after or RUBRIC_PLACEHOLDER in conversation:
            return None
        # JSON escapes each character alone: the pieces escaped apart and joined are the whole escaped.
        start = before + '"' + _HEAD + _escaped(conversation) + _BRIDGE

        def payload(item: str) -> bytes:
            return (start + _escaped(item) + _TAIL + '"' + after).encode()

        return payload

    def failure(self, exc: RequestFailed) -> str:
        """Why a grader call failed, in words, with the cure of an output cap that ran out before a verdict (a
        thinking grader's, say): a larger `grader_max_output_tokens`, which asking again does not give."""
        if not exc.cut_short:
            return str(exc)
        cap = self.shape.max_output_tokens
        now = f", {cap:,} tokens now" if cap is not None else ""
        return f"{exc}; give the grader a larger output cap (`grader_max_output_tokens`{now})"

    async def verdict(
        self, prompt: str, *, ident: str | None = None, cache_key: str | None = None, affinity: str | None = None
    ) -> Answer:
        """One grader call for a rendered grader prompt; raises `RequestFailed` past the retry bound.

        `ident` names the (sample, rubric item) the call is for: the reference grades every item of every
        sample with a call of its own, so identical requests of different items are not one verdict. With
        a cache, the request (without its cache key) and its `ident` are the key, and a hit is reused: nothing is
        sent, and its usage is what the call cost when it was made (by an earlier session, say), so the item it
        belongs to keeps it. `cache_key` is sent as the request's `prompt_cache_key`; `affinity` (`Grader.affinity`)
        groups it with its siblings for a pool of servers.
        """
        return await self._verdict(prompt, self._encoded(prompt, None)[0], ident, cache_key, affinity)

    async def _verdict(
        self, prompt: str, payload: bytes, ident: str | None, cache_key: str | None, affinity: str | None
    ) -> Answer:
        """`verdict`, for the prompt's request bytes `payload` (without a cache key)."""
        sent = payload if cache_key is None else with_cache_key(payload, cache_key)
        parsed = self.request_body(prompt)  # for the client to count its tokens without parsing `sent` again
        if self.cache is None:
            found = await self.client.complete(sent, parse_verdict, ident=ident, parsed=parsed, affinity=affinity)
            return Answer(*found)
        key = request_key(payload if ident is None else payload + b"\0" + ident.encode())
        cached = self.cache.get_verdict(key)
        if cached is not None:
            return Answer(*cached, reused=True)
        verdict, usage = await self.client.complete(sent, parse_verdict, ident=ident, parsed=parsed, affinity=affinity)
        self.cache.put_verdict(key, verdict, usage)
        return Answer(verdict, usage)

    async def grade(
        self, prompt_id: str, transcript: Sequence[Message], rubrics: Sequence[RubricItem], *, ident: str | None = None
    ) -> GradedReply:
        """Grade the last assistant turn of `transcript` against every rubric item, concurrently (in one call,
        per-reply); `ident` names the sample, for the verdicts of its items to be kept apart from other samples'.

        The first item that cannot be graded cancels the others and raises `GradingError` (a per-reply call
        that fails, `ReplyGradingError`).
        """
        conversation = render_conversation(transcript)
        if self.calls == "per-reply":
            results = await grade_reply(self, prompt_id, transcript, conversation, rubrics, ident or prompt_id)
        else:
            results = await self._per_item(prompt_id, conversation, rubrics, ident)
        graded = GradedReply(prompt_id, [])
        for item, answer in zip(rubrics, results, strict=True):
            graded.usage.add(answer.usage)
            graded.paid.add(answer.paid)
            verdict = answer.verdict
            graded.items.append(
                GradedItem(item.criterion, item.points, list(item.tags), verdict.criteria_met, verdict.explanation)
            )
        return graded

    async def _per_item(
        self, prompt_id: str, conversation: str, rubrics: Sequence[RubricItem], ident: str | None
    ) -> list[Answer]:
        # Every item's prompt starts with the template's head and the whole conversation, reply included.
        cache_key = self.cache_key(conversation)
        affinity = self.affinity(conversation)
        payloads = self._item_payloads(conversation)
        prompts = item_prompts(conversation)

        async def one(index: int, item: RubricItem) -> Answer:
            item_ident = None if ident is None else f"{ident}/{index}"
            text = rubric_item_text(item)
            if payloads is not None:
                prompt, payload = prompts(text), payloads(text)
            else:
                prompt = grader_prompt(conversation, text)
                payload = self._encoded(prompt, None)[0]
            try:
                return await self._verdict(prompt, payload, item_ident, cache_key, affinity)
            except RequestFailed as exc:
                raise GradingError(prompt_id, item.criterion, self.failure(exc), lasting=exc.lasting) from None

        # The first failure stops the siblings and awaits them, so none outlives the reply it grades (nor sends
        # after it).
        return await together(one(index, item) for index, item in enumerate(rubrics))
