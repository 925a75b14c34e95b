"""The opt-in grader prompt that grades a whole rubric in one call (`--grader-calls per-reply`).

`grader_template_per_reply.txt` is this project's, adapted from the reference's instructions and examples (MIT,
see `LICENSE-simple-evals.txt`): the conversation once, then every rubric item numbered (`## Item 1`, ...), and
a request for a JSON list of `{"id", "explanation", "criteria_met"}`. Its conversation and items go into their
two places as they are (the template is split, not searched and replaced), so a conversation that holds a
placeholder's text is not substituted again. Its instructions come first and the conversation after them, so
the requests of one task's replies share the longest start a prompt cache can reuse.

The answer must be a JSON list with a valid verdict for every item's id exactly once (`parse_verdicts`); any other
answer is asked again as a bad verdict is, and past the bound the reply fails as a whole (`ReplyGradingError`).
The call (`reply_verdicts`) goes through the grader's client and verdict cache, and keeps each item's verdict
apart.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any, Protocol

from healthbench.api.client import Completer
from healthbench.api.wire import Usage, request_key, with_cache_key
from healthbench.data.schema import Message, RubricItem
from healthbench.errors import InvalidResponse, ReplyGradingError, RequestFailed
from healthbench.grading.prompt import render_conversation, rubric_item_text
from healthbench.grading.verdict import Answer, Verdict, VerdictCache, decode_answer, read_verdict

PER_REPLY_TEMPLATE = (
    resources.files("healthbench.grading").joinpath("grader_template_per_reply.txt").read_bytes().decode("utf-8")
)
PER_REPLY_TEMPLATE_SHA256 = hashlib.sha256(PER_REPLY_TEMPLATE.encode("utf-8")).hexdigest()
_HEAD, _MIDDLE, _TAIL = re.split("<<conversation>>|<<rubric_items>>", PER_REPLY_TEMPLATE)
# What the prompt holds besides its conversation and items: its start (shared by every request), and in all.
HEAD_CHARS = len(_HEAD)
FIXED_CHARS = len(_HEAD) + len(_MIDDLE) + len(_TAIL)
# A grader that is not a reasoning model, with no output cap given, may write this many tokens per item (at least
# the reference's 2,048 in all): one list for a rubric of 30 items runs past 2,048, and a list cut short is no
# answer.
ITEM_OUTPUT_TOKENS = 256


class ReplyGrader(Protocol):
    """What a per-reply call needs of its grader (`grader.Grader`, which calls this module: a structural type, so
    the two modules do not import each other): its client and verdict cache, its requests, its failures said."""

    client: Completer
    cache: VerdictCache | None

    def request_body(self, prompt: str, *, items: int | None = None) -> dict[str, Any]:
        """The request for `prompt`, as an object."""

    def request_bytes(self, prompt: str, cache_key: str | None = None, *, items: int | None = None) -> bytes:
        """The request for `prompt`, as the bytes sent."""

    def cache_key(self, shared: str) -> str | None:
        """The prompt cache key of requests that share `shared`, or None where none is sent."""

    def failure(self, exc: RequestFailed) -> str:
        """A failed request, said as a grading failure's cause."""


def output_cap(cap: int, items: int) -> int:
    """A per-reply request's output cap for a rubric of `items`, from the reference's default cap `cap`."""
    return max(cap, items * ITEM_OUTPUT_TOKENS)


def numbered_items(items: Sequence[str]) -> str:
    """Rubric items as the prompt lists them: `## Item 1`, its text, a blank line, `## Item 2`, ..."""
    return "\n\n".join(f"## Item {number}\n{text}" for number, text in enumerate(items, 1))


def heading_chars(count: int) -> int:
    """The characters `numbered_items` adds to `count` items' texts (headings and blank lines)."""
    return sum(len(f"## Item {number}\n") for number in range(1, count + 1)) + 2 * max(count - 1, 0)


def per_reply_prompt(conversation: str, items: Sequence[str]) -> str:
    """The per-reply grader prompt: the conversation once, then every rubric item numbered from 1."""
    return _HEAD + conversation + _MIDDLE + numbered_items(items) + _TAIL


def _item_id(value: Any) -> int | None:
    """An item's id as the grader wrote it: a JSON integer, or a string of one (not a float, not a boolean)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value.strip())
    return None


def parse_verdicts(text: str, count: int) -> list[Verdict]:
    """Parse a per-reply grader answer for items 1 to `count`: a JSON list (fenced or not) holding one object
    per item, each with its `id` and a verdict as `parse_verdict` takes it; the verdicts in item order.

    `InvalidResponse` (asked again, like a bad verdict) for anything else: not JSON, not a list, an entry that
    is not an object, an id missing, repeated, or not one of the items, a `criteria_met` that is no boolean."""
    parsed = decode_answer(text)
    if not isinstance(parsed, list):
        raise InvalidResponse("grader answer is not a JSON list")
    found: dict[int, Verdict] = {}
    for entry in parsed:
        if not isinstance(entry, dict):
            raise InvalidResponse("an entry of the grader's list is not a JSON object")
        number = _item_id(entry.get("id"))
        if number is None or not 1 <= number <= count:
            shown = json.dumps(entry.get("id"))[:20]
            raise InvalidResponse(f"the grader's list has id {shown}, not one of 1 to {count}")
        if number in found:
            raise InvalidResponse(f"the grader's list has id {number} twice")
        found[number] = read_verdict(entry, f"item {number}: ")
    missing = [str(number) for number in range(1, count + 1) if number not in found]
    if missing:
        shown = ", ".join(missing[:10]) + (", ..." if len(missing) > 10 else "")
        raise InvalidResponse(f"the grader's list has no verdict for id {shown}")
    return [found[number] for number in range(1, count + 1)]


async def reply_verdicts(
    grader: ReplyGrader, prompt: str, count: int, *, ident: str, cache_key: str | None = None
) -> list[Answer]:
    """One call of `grader` for a per-reply prompt of `count` items, its usage with the first; raises
    `RequestFailed` past the retry bound (an answer without a valid verdict for every item is asked again, as
    a bad verdict is).

    `ident` names the sample; with a cache, item i's verdict is kept under the request and `ident/i`, and
    the call's usage with the first item, so a resumed run asks again only for a reply not all of whose
    verdicts are kept (and reuses those with what they cost)."""
    # Encoded once: the same bytes are sent and are part of the cache key.
    payload = grader.request_bytes(prompt, items=count)
    sent = payload if cache_key is None else with_cache_key(payload, cache_key)
    parse = functools.partial(parse_verdicts, count=count)
    parsed = grader.request_body(prompt, items=count)
    cache = grader.cache
    if cache is not None:
        keys = [request_key(payload + b"\0" + f"{ident}/{index}".encode()) for index in range(count)]
        kept = [cache.get_verdict(key) for key in keys]
        if all(pair is not None for pair in kept):
            return [Answer(*pair, reused=True) for pair in kept if pair is not None]
    found, usage = await grader.client.complete(sent, parse, ident=ident, parsed=parsed)
    answers = [Answer(verdict, usage if index == 0 else Usage()) for index, verdict in enumerate(found)]
    if cache is not None:
        for key, answer in zip(keys, answers, strict=True):
            cache.put_verdict(key, answer.verdict, answer.usage)
    return answers


async def grade_reply(
    grader: ReplyGrader,
    prompt_id: str,
    transcript: Sequence[Message],
    conversation: str,
    rubrics: Sequence[RubricItem],
    ident: str,
) -> list[Answer]:
    """Every rubric item of the reply that ends `transcript` (rendered as `conversation`), in one call of
    `grader`: the answers in item order, or `ReplyGradingError` past the retry bound."""
    # One request per reply: what its requests share with others is the task's conversation before the reply.
    cache_key = grader.cache_key(render_conversation(transcript[:-1]))
    prompt = per_reply_prompt(conversation, [rubric_item_text(item) for item in rubrics])
    try:
        return await reply_verdicts(grader, prompt, len(rubrics), ident=ident, cache_key=cache_key)
    except RequestFailed as exc:
        raise ReplyGradingError(prompt_id, len(rubrics), grader.failure(exc), lasting=exc.lasting) from None
