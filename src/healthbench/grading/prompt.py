"""Grading one reply against its rubric, item by item, exactly as OpenAI's reference does.

The grader prompt is the reference template (shipped byte-for-byte as package data) with the
conversation and the rubric item substituted by plain string replacement, in that order. A verdict is valid
only when `criteria_met` is a JSON boolean; anything else is asked again within the client's retry bound,
and an item that never gets a valid verdict makes the whole task fail with `GradingError`. No partial
score is ever produced.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources

from healthbench.data.schema import Message, RubricItem

TEMPLATE = resources.files("healthbench.grading").joinpath("grader_template.txt").read_bytes().decode("utf-8")
TEMPLATE_SHA256 = hashlib.sha256(TEMPLATE.encode("utf-8")).hexdigest()
GRADER_SYSTEM_MESSAGE = "You are a helpful assistant."


def render_conversation(messages: Sequence[Message]) -> str:
    """The transcript as the grader sees it: `role: content` turns joined by a blank line."""
    return "\n\n".join(f"{m.role}: {m.content}" for m in messages)


def rubric_item_text(item: RubricItem) -> str:
    """A rubric item as the grader sees it: `[points] criterion`, points as the JSON integer."""
    return f"[{item.points}] {item.criterion}"


def grader_prompt(conversation: str, rubric_item: str) -> str:
    """The reference grader prompt; the conversation is substituted first, as the reference does."""
    return TEMPLATE.replace("<<conversation>>", conversation).replace("<<rubric_item>>", rubric_item)


def transcript_with_reply(prompt: Sequence[Message], reply: str, system_message: str | None = None) -> list[Message]:
    """The graded transcript: an optional system message the runner sent, the prompt, then the reply."""
    head = [Message(role="system", content=system_message)] if system_message else []
    return [*head, *prompt, Message(role="assistant", content=reply)]
