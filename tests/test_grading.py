"""The grader prompt, byte for byte, and verdict parsing."""

from __future__ import annotations

import asyncio
import hashlib
from importlib import resources
from typing import Any

import pytest

from healthbench.api.client import ApiClient
from healthbench.api.completer import Completer, Request
from healthbench.data.schema import Message, RubricItem
from healthbench.errors import GradingError, InvalidResponse, RequestFailed
from healthbench.grading.grader import Grader
from healthbench.grading.prompt import (
    TEMPLATE,
    TEMPLATE_SHA256,
    grader_prompt,
    render_conversation,
    rubric_item_text,
    transcript_with_reply,
)
from healthbench.grading.verdict import parse_verdict

PINNED = "2adffd51fd259554ebcd036ad1072d4aa2b7ce3aec2bbffe36271f911632ed3c"


def test_template_is_the_reference_byte_for_byte() -> None:
    shipped = resources.files("healthbench.grading").joinpath("grader_template.txt").read_bytes()
    assert hashlib.sha256(shipped).hexdigest() == PINNED
    assert TEMPLATE_SHA256 == PINNED
    assert TEMPLATE.encode("utf-8") == shipped
    assert "Only return true is all of the criteria are met." in TEMPLATE  # the reference's typo, kept
    notice = resources.files("healthbench.grading").joinpath("LICENSE-simple-evals.txt").read_text()
    assert "MIT License" in notice and "OpenAI" in notice


def test_conversation_and_rubric_rendering() -> None:
    transcript = transcript_with_reply(
        [Message(role="user", content="a"), Message(role="assistant", content="b"), Message(role="user", content="c")],
        "d",
    )
    assert render_conversation(transcript) == "user: a\n\nassistant: b\n\nuser: c\n\nassistant: d"
    assert rubric_item_text(RubricItem(criterion="Says hi", points=10, tags=[])) == "[10] Says hi"
    assert rubric_item_text(RubricItem(criterion="Rude", points=-7, tags=[])) == "[-7] Rude"
    with_system = transcript_with_reply([Message(role="user", content="a")], "d", "Be brief.")
    assert render_conversation(with_system) == "system: Be brief.\n\nuser: a\n\nassistant: d"


def test_prompt_substitutes_conversation_first() -> None:
    prompt = grader_prompt("user: mentions <<rubric_item>>", "[1] X")
    assert "# Conversation\nuser: mentions [1] X\n\n# Rubric item\n[1] X\n\n# Instructions" in prompt
    assert prompt.startswith("Your job is to look at a conversation")
    assert "<<" not in prompt


def test_request_body_matches_the_reference_sampler() -> None:
    grader = Grader(ApiClient("http://127.0.0.1:9/v1"))
    assert grader.request_body("P") == {
        "model": "gpt-4.1-2025-04-14",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "P"},
        ],
        "temperature": 0.5,
        "max_tokens": 2048,
    }


@pytest.mark.parametrize(
    ("text", "met", "explanation"),
    [
        ('```json\n{"explanation": "ok", "criteria_met": true}\n```', True, "ok"),
        ('  {"criteria_met": false}  ', False, "No explanation provided"),
        ('```json{"criteria_met": false, "explanation": ["a"]}```', False, '["a"]'),
    ],
)
def test_valid_verdicts(text: str, met: bool, explanation: str) -> None:
    verdict = parse_verdict(text)
    assert verdict.criteria_met is met
    assert verdict.explanation == explanation


@pytest.mark.parametrize(
    "text",
    [
        '{"criteria_met": "true"}',
        '{"criteria_met": 1}',
        '{"criteria_met": null}',
        '{"explanation": "no verdict"}',
        "[true]",
        "The response meets the criterion.",
        '```json\n{"criteria_met": true\n```',
    ],
)
def test_invalid_verdicts(text: str) -> None:
    with pytest.raises(InvalidResponse):
        parse_verdict(text)


class _OneFailsOneWaits(Completer):
    """A completer whose first item's call fails at once and whose second waits until it is cancelled."""

    def __init__(self) -> None:
        self.calls = 0
        self.waiting_ended = False

    async def _complete(self, request: Request, parse: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(0)  # the other call is out by now
            raise RequestFailed("HTTP 500: down", 12)
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            self.waiting_ended = True

    async def aclose(self) -> None:
        """Nothing to close."""


def test_an_item_that_cannot_be_graded_stops_its_siblings_before_the_reply_fails() -> None:
    client = _OneFailsOneWaits()
    rubrics = [RubricItem(criterion=f"Item {i}", points=1, tags=[]) for i in range(2)]

    async def grade() -> None:
        with pytest.raises(GradingError, match="rubric item 'Item 0' could not be graded: HTTP 500: down"):
            await Grader(client).grade("p1", transcript_with_reply([Message(role="user", content="a")], "b"), rubrics)
        # Cancelled and awaited: nothing of the failed reply is still running when its error arrives.
        assert client.calls == 2 and client.waiting_ended
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(grade())
