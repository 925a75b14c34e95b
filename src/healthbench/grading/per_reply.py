"""The opt-in grader prompt that grades a whole rubric in one call (`--grader-calls per-reply`).

`grader_template_per_reply.txt` is this project's, adapted from the reference's instructions and examples (MIT,
see `LICENSE-simple-evals.txt`): the conversation once, then every rubric item numbered (`## Item 1`, ...), and
a request for a JSON list of `{"id", "explanation", "criteria_met"}`. Its conversation and items go into their
two places as they are (the template is split, not searched and replaced), so a conversation that holds a
placeholder's text is not substituted again. Its instructions come first and the conversation after them, so
the requests of one task's replies share the longest start a prompt cache can reuse.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from importlib import resources

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
