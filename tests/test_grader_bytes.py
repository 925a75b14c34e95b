"""The item requests' bytes, assembled from the conversation escaped once per reply, are byte for byte what
encoding each request's body gives: what the reference sends, what verdicts are stored under; their prompts (whose
length the pace counts) are what the reference's substitution gives."""

from __future__ import annotations

import json

import pytest

from healthbench.api.wire import Shape
from healthbench.grading.grader import REFERENCE_SHAPE, Grader
from healthbench.grading.prompt import grader_prompt, item_prompts

CONVERSATIONS = [
    "user: I have had a headache since this morning.\n\nassistant: Rest and drink water.",
    'user: Is "ibuprofen" safe at 400 mg\\day?\t\r\n\nassistant: Usually, yes \u2014 with food.'
    " Caf\u00e9 \u00fcber \u4f60\u597d \U0001f600",
    "user: \u0000\u001f control characters\n\nassistant: \ud800 and <<conversation>> stay as they are",
]
ITEMS = ["[5] Advises rest", '[-3] Says "no" \u2014 and \\ a backslash', "[7] \U0001f489 <<rubric_item>>"]


@pytest.mark.parametrize(
    "shape",
    [REFERENCE_SHAPE, Shape(reasoning=True, effort="low"), Shape(api="responses", reasoning=True, effort="low")],
)
@pytest.mark.parametrize("system_message", [True, False])
def test_item_requests_are_the_bytes_their_bodies_encode_to(shape: Shape, system_message: bool) -> None:
    grader = Grader(client=None, shape=shape, system_message=system_message)  # type: ignore[arg-type]
    for conversation in CONVERSATIONS:
        payloads = grader._item_payloads(conversation)
        assert payloads is not None
        for item in ITEMS:
            expected = json.dumps(grader.request_body(grader_prompt(conversation, item))).encode()
            assert payloads(item) == expected
            assert item_prompts(conversation)(item) == grader_prompt(conversation, item)


def test_a_conversation_holding_the_rubric_items_placeholder_is_encoded_whole() -> None:
    # The reference replaces the placeholder in the conversation too: that prompt is built and encoded as it is.
    assert Grader(client=None)._item_payloads("user: what is <<rubric_item>>?") is None  # type: ignore[arg-type]
