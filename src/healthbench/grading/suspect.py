"""Replies that address the grader: marked, never scored differently.

A reply that writes the grader's own output format, or restates a criterion of its task, is either a policy that
learned to talk to the grader or a rare coincidence; either way a trainer wants to see it. The marks go into
results.jsonl (`suspect`) and the environment's reward metadata, and the report counts them; the score is the
grader's, as in the reference, whatever the marks say.
"""

from __future__ import annotations

from collections.abc import Sequence

from healthbench.data.schema import RubricItem

# The rules, by the names results.jsonl gives them.
GRADER_FORMAT = "grader_format"
RUBRIC_TEXT = "rubric_text"
RULES = (GRADER_FORMAT, RUBRIC_TEXT)
# The key of the grader's verdict object, which no answer to a patient has a reason to write.
_VERDICT_KEY = "criteria_met"
# A criterion shorter than this many words ("Calls emergency services.") is something a good reply may well say
# in passing, so only longer ones count as restated.
MIN_CRITERION_WORDS = 6


def _normal(text: str) -> str:
    """Lower case, whitespace runs as one space, no closing full stop: a restated criterion matches however it
    was wrapped or capitalised."""
    # str.split() splits where the regex \s+ would (the same Unicode whitespace) at a fifth of its cost: this
    # runs for every rubric item of every reply.
    return " ".join(text.split()).lower().rstrip(".")


def suspect(reply: str, rubrics: Sequence[RubricItem]) -> tuple[str, ...]:
    """The rules `reply` trips, in `RULES` order: `grader_format` when it contains `criteria_met`, the key of
    the grader's verdict; `rubric_text` when it contains the text of one of its task's criteria (of at least
    `MIN_CRITERION_WORDS` words), ignoring case, whitespace and a closing full stop. Empty for a clean reply."""
    found = []
    if _VERDICT_KEY in reply.lower():
        found.append(GRADER_FORMAT)
    text = _normal(reply)
    for item in rubrics:
        criterion = _normal(item.criterion)
        if len(criterion.split()) >= MIN_CRITERION_WORDS and criterion in text:
            found.append(RUBRIC_TEXT)
            break
    return tuple(found)
