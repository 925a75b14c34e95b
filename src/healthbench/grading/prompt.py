"""The grader prompt, exactly as OpenAI's reference builds it.

The template is shipped byte for byte as package data (with the MIT notice of simple-evals); the conversation and
the rubric item are substituted by plain string replacement, in that order. A conversation is rendered as
`role: content` turns joined by a blank line, a rubric item as `[points] criterion`.

A prompt cache key names the text that the requests carrying it share from their start (see `prompt_cache_key`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from importlib import resources

from healthbench.data.schema import Message, RubricItem

TEMPLATE = resources.files("healthbench.grading").joinpath("grader_template.txt").read_bytes().decode("utf-8")
TEMPLATE_SHA256 = hashlib.sha256(TEMPLATE.encode("utf-8")).hexdigest()
GRADER_SYSTEM_MESSAGE = "You are a helpful assistant."
CONVERSATION_PLACEHOLDER = "<<conversation>>"
RUBRIC_PLACEHOLDER = "<<rubric_item>>"
# The template around its placeholders: before the conversation, from it to the rubric item, and after that.
TEMPLATE_HEAD, _, _REST = TEMPLATE.partition(CONVERSATION_PLACEHOLDER)
TEMPLATE_BRIDGE, _, TEMPLATE_TAIL = _REST.partition(RUBRIC_PLACEHOLDER)
# The reference substitutes by replacing every placeholder: the pieces stand for its prompt when each placeholder
# is there just once, the conversation's first.
SPLICEABLE = (
    TEMPLATE.count(CONVERSATION_PLACEHOLDER),
    TEMPLATE.count(RUBRIC_PLACEHOLDER),
    _REST.count(RUBRIC_PLACEHOLDER),
) == (1, 1, 1)
# What every item of one reply shares besides the conversation (for the dry run's cache estimate).
REFERENCE_HEAD_CHARS = TEMPLATE.index(CONVERSATION_PLACEHOLDER)
REFERENCE_BRIDGE_CHARS = TEMPLATE.index(RUBRIC_PLACEHOLDER) - REFERENCE_HEAD_CHARS - len(CONVERSATION_PLACEHOLDER)


def render_conversation(messages: Sequence[Message]) -> str:
    """The transcript as the grader sees it: `role: content` turns joined by a blank line."""
    return "\n\n".join(f"{m.role}: {m.content}" for m in messages)


def rubric_item_text(item: RubricItem) -> str:
    """A rubric item as the grader sees it: `[points] criterion`, points as the JSON integer."""
    return f"[{item.points}] {item.criterion}"


def grader_prompt(conversation: str, rubric_item: str) -> str:
    """The reference grader prompt; the conversation is substituted first, as the reference does."""
    return TEMPLATE.replace(CONVERSATION_PLACEHOLDER, conversation).replace(RUBRIC_PLACEHOLDER, rubric_item)


def item_prompts(conversation: str) -> Callable[[str], str]:
    """Each rubric item's grader prompt for one conversation, joined from the template's pieces around its
    placeholders: what `grader_prompt`'s two replacements over the whole template give when the template is
    `SPLICEABLE` and the conversation holds no rubric item placeholder (the caller's to check), where
    `Grader._item_payloads` splices, without those two replacements for every item."""
    start = TEMPLATE_HEAD + conversation + TEMPLATE_BRIDGE
    return lambda item: start + item + TEMPLATE_TAIL


def prompt_cache_key(shared: str) -> str:
    """The `prompt_cache_key` of the requests whose prompts all start with the grader's text around `shared` (a
    rendered conversation): a digest, so the key is the same wherever those requests are made (live, in a
    batch, by another process), differs for another conversation, and carries none of its text."""
    return "healthbench-" + hashlib.sha256(shared.encode("utf-8")).hexdigest()[:32]


def transcript_with_reply(prompt: Sequence[Message], reply: str, system_message: str | None = None) -> list[Message]:
    """The graded transcript: an optional system message the runner sent, the prompt, then the reply."""
    head = [Message(role="system", content=system_message)] if system_message else []
    return [*head, *prompt, Message(role="assistant", content=reply)]
