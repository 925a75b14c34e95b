"""The OpenReward recipe of docs/integrations.md, run as written against `healthbench serve` on loopback: its
rewards equal `healthbench grade` on the same replies, and an ungradable reply raises instead of scoring 0."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openreward")

from openreward.api.errors import ToolFailed

from healthbench.testing import GRADER_MARKER, FakeOpenAI, policy_reply
from tests.conftest import write_jsonl
from tests.reference import KEY, made_up_rows
from tests.test_grade_cli import grade

DOC = Path(__file__).parents[1] / "docs" / "integrations.md"
POLICY_KEY = "sk-policy-0123456789"


def recipe() -> Callable[..., Any]:
    """The `evaluate` function of the documentation's last Python block, defined as a reader would run it."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "recipe"}
    exec(compile(blocks[-1], str(DOC), "exec"), namespace)
    evaluate: Callable[..., Any] = namespace["evaluate"]
    return evaluate


@contextmanager
def serve(data: Path, grader_url: str) -> Iterator[str]:
    """`healthbench serve --data ...` in a process of its own; yields its URL."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "HEALTHBENCH_GRADER_API_KEY")}
    # The grader must follow its own setting, never the policy's OPENAI_BASE_URL.
    env.update(PYTHONUNBUFFERED="1", HEALTHBENCH_GRADER_BASE_URL=grader_url, OPENAI_BASE_URL="http://127.0.0.1:9")
    command = [sys.executable, "-m", "healthbench", "serve", "--data", str(data), "--host", "127.0.0.1", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--max-attempts", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if "Uvicorn running on" in line:
                started.set()
        started.set()  # the process ended: the assertion below shows its output

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(120), "server did not start"
        found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", "".join(lines))
        assert found, "".join(lines)
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(60)
        reader.join()
    assert KEY not in "".join(lines)


def test_the_documented_loop_gets_the_rewards_grade_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = made_up_rows()[:6]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    evaluate = recipe()
    failing = {"on": False}

    def grader_fails(body: dict[str, Any]) -> bool:
        return failing["on"] and GRADER_MARKER in body["messages"][-1]["content"]

    with FakeOpenAI(fail_always=grader_fails) as fake:
        assert fake.base_url
        monkeypatch.setenv("OPENAI_API_KEY", POLICY_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)  # the policy; the server's grader ignores it
        monkeypatch.setenv("HEALTHBENCH_GRADER_API_KEY", KEY)
        with serve(data, fake.base_url) as url:
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
