"""The OpenReward recipe of docs/integrations.md, run as written against `healthbench serve` on loopback with a
token (which the recipe's client sends from OPENREWARD_API_KEY): its rewards equal `healthbench grade` on the same
replies, and an ungradable reply raises instead of scoring 0."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openreward")

from openreward.api.errors import ToolFailed

from healthbench.testing import GRADER_MARKER, FakeOpenAI, policy_reply
from tests.conftest import write_jsonl
from tests.reference import KEY, made_up_rows
from tests.serving import doc_function, served
from tests.test_grade_cli import grade

POLICY_KEY = "sk-policy-0123456789"
TOKEN = "recipe-token-0123456789abcdef"  # the server's


def test_the_documented_loop_gets_the_rewards_grade_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = made_up_rows()[:6]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    evaluate = doc_function("sdk_loop.py", "evaluate")
    failing = {"on": False}

    def grader_fails(body: dict[str, Any]) -> bool:
        return failing["on"] and GRADER_MARKER in body["messages"][-1]["content"]

    with FakeOpenAI(fail_always=grader_fails) as fake:
        assert fake.base_url
        monkeypatch.setenv("OPENAI_API_KEY", POLICY_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)  # the policy; the server's grader ignores it
        monkeypatch.setenv("HEALTHBENCH_GRADER_API_KEY", KEY)
        monkeypatch.setenv("OPENREWARD_API_KEY", TOKEN)  # the loop's client sends it as X-API-Key
        with served(data, fake.base_url, env={"HEALTHBENCH_SERVER_TOKEN": TOKEN}) as url:
            rewards = asyncio.run(evaluate(url, "policy"))
            graded_with = set(fake.auth_headers)
            failing["on"] = True
            with pytest.raises(ToolFailed, match="could not be graded"):
                asyncio.run(evaluate(url, "policy", limit=1))
        replies = {r["prompt_id"]: policy_reply(r["prompt"]) for r in rows}
        responses = write_jsonl(
            tmp_path / "replies.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()]
        )
        failing["on"] = False
        result = grade(tmp_path, data, responses, "grade", fake.base_url)
    assert result.exit_code == 0, result.output
    assert graded_with == {f"Bearer {POLICY_KEY}", f"Bearer {KEY}"}
    results = (tmp_path / "grade" / "results.jsonl").read_text().split("\n")[:-1]
    scores = {r["prompt_id"]: r["score"] for r in map(json.loads, results)}
    assert rewards == pytest.approx([scores[r["prompt_id"]] for r in rows], abs=1e-9)
