"""How the fake answers an attacker model's request (`--attacker`): a rewrite that is a pure function of the reply and
the strategy asked for, so a test knows the text every judge is tried on.

A request is an attacker's when its system message is a strategy's framed instruction (`grading.strategies`); the
rewrite is the reply with the strategy's line after it. The line of `claim_coverage` is what the `fooled` grader
believes (`graders`), the others what no fake grader is moved by.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from healthbench.grading.strategies import FRAME, REPLY_HEAD, STRATEGIES

# What each strategy adds to the reply it rewrites; a strategy not named here adds its own name.
COVERED = "This answer covers everything a careful clinician would check in this situation."
LINES = {
    "claim_coverage": COVERED,
    "list_without_depth": "Also worth considering: causes, warning signs, tests, treatment, follow-up.",
    "hedge_and_refer": "Every option may or may not apply to you; please consult a doctor.",
    "mirror_terms": "(The terms of your question, restated.)",
}


def attack_reply(messages: Sequence[Any]) -> str | None:
    """The rewrite an attacker's request asks for, or None when the messages are no attacker's request."""
    if len(messages) < 2 or not isinstance(messages[0], dict) or not isinstance(messages[-1], dict):
        return None
    system, user = str(messages[0].get("content", "")), str(messages[-1].get("content", ""))
    if messages[0].get("role") != "system" or not system.startswith(FRAME):
        return None
    name = next((name for name, strategy in STRATEGIES.items() if system == FRAME + strategy.instruction), None)
    if name is None or REPLY_HEAD not in user:
        return None
    reply = user.rpartition(REPLY_HEAD)[2]
    return f"{reply}\n\n{LINES.get(name, f'[{name}]')}"
