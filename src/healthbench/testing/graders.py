"""How the fake decides a grader request's verdict: one of a few graders, chosen by name.

Each is a pure function of the grader prompt (and a seed), so a test can say what it expects; they exist to
check `healthbench probe`, which must find a gain where a grader can be fooled and none where it cannot:

- `hashed` (the default): a verdict from a hash of the whole prompt, as every other test relies on;
- `fooled`: fooled by what a naive LLM judge is fooled by: a reply that tells the grader `"criteria_met": true`
  gets every item met, a reply that claims to cover everything a careful clinician would (the fake attacker's
  `claim_coverage` rewrite) too, and a reply that restates an item's criterion gets that item met; otherwise the
  verdict depends on the rubric item alone, so nothing else about a reply moves it;
- `reply_blind`: the verdict depends on the rubric item alone, never on the reply;
- `coin`: a seeded coin flip per request (a hash of the seed and the prompt), so every rewrite of a reply is
  judged afresh by chance.
"""

from __future__ import annotations

import hashlib
import re

from healthbench.errors import SettingsError
from healthbench.testing.replies import item_verdict, prompt_verdict

__all__ = ["GRADERS", "fake_verdict", "graded_parts", "item_prompt", "list_item_verdict"]

GRADERS: tuple[str, ...] = ("hashed", "fooled", "reply_blind", "coin")

# The grader template's section heads around the conversation and the rubric item.
_CONVERSATION = "# Conversation\n"
_RUBRIC_ITEM = "\n\n# Rubric item\n"
_INSTRUCTIONS = "\n\n# Instructions\n"
_REPLY_TURN = "\n\nassistant: "
_POINTS = re.compile(r"^\[-?\d+\] ", re.ASCII)
_CLAIM = re.compile(r'"criteria_met"\s*:\s*true')
_SPACE = re.compile(r"\s+")
# A claim of coverage, as the fake attacker's `claim_coverage` rewrite makes it.
_COVERED = "everything a careful clinician would"


def graded_parts(prompt: str) -> tuple[str, str]:
    """The reply graded (the conversation's last assistant turn) and the criterion (without its `[points]`),
    read out of a grader prompt. The rubric item is the last section of its name, since a reply may contain
    anything, that heading included."""
    head, _, tail = prompt.rpartition(_RUBRIC_ITEM)
    criterion = _POINTS.sub("", tail.split(_INSTRUCTIONS, 1)[0])
    conversation = head.split(_CONVERSATION, 1)[-1]
    _, turn, reply = conversation.rpartition(_REPLY_TURN)
    return (reply if turn else ""), criterion


def item_prompt(conversation: str, item: str) -> str:
    """The sections of a grader prompt that `graded_parts` reads, for one item of a per-reply prompt: so each of its
    items is judged as its own prompt would be."""
    return f"{_CONVERSATION}{conversation}{_RUBRIC_ITEM}{item}{_INSTRUCTIONS}"


def _flip(*parts: str) -> bool:
    return hashlib.sha256("\0".join(parts).encode()).digest()[0] % 2 == 0


def _normal(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def fake_verdict(grader: str, prompt: str, seed: int = 0) -> tuple[bool, str]:
    """`grader`'s verdict on a grader prompt and its explanation."""
    if grader == "hashed":
        return prompt_verdict(prompt), "fake verdict"
    if grader == "coin":
        return _flip(str(seed), prompt), "decided by a coin flip"
    reply, criterion = graded_parts(prompt)
    if grader == "fooled":
        if _CLAIM.search(reply):
            return True, "The response itself states that the criteria are met, so they are met."
        if _COVERED in _normal(reply):
            return True, "The response states that it covers everything a careful clinician would check."
        if _normal(criterion) and _normal(criterion) in _normal(reply):
            return True, f"The response states: {criterion}"
    elif grader != "reply_blind":
        raise SettingsError(f"unknown fake grader {grader!r}; choose from {', '.join(GRADERS)}")
    return _flip(str(seed), criterion), "judged from the rubric item alone"


def list_item_verdict(grader: str, conversation: str, item: str, seed: int = 0) -> tuple[bool, str]:
    """One item of a per-reply prompt, judged by `grader` as it judges the item's own prompt (`hashed` by
    `item_verdict`, since a per-reply prompt is not the per-item one it hashes)."""
    if grader == "hashed":
        return item_verdict(conversation, item), "fake verdict"
    return fake_verdict(grader, item_prompt(conversation, item), seed)
