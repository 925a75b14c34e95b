"""inspect-openreward 0.3.0, unmodified, against `healthbench serve`: the task file of docs/integrations.md run
with `inspect eval` as written there, its model an OpenAI-compatible endpoint that calls `answer`. Every sample's
score equals `healthbench grade`'s for the reply the model submitted.

Runs where inspect-openreward is installed (`.venv-clients`, made by `scripts/dev test`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from healthbench.integrations.openreward.deployment import answer_prompt_text
from healthbench.testing import FakeOpenAI
from healthbench.testing.agent import answer_reply
from tests.conftest import write_jsonl
from tests.reference import KEY, made_up_rows
from tests.serving import doc_block, graded_by_cli, served

pytest.importorskip("inspect_openreward")

from inspect_ai.log import list_eval_logs, read_eval_log

from healthbench.data.loading import load_rows

ROWS = made_up_rows()[:6]
TOKEN = "inspect-token-0123456789abcdef"


def inspect_eval(task_file: Path, url: str, fake: FakeOpenAI, logs: Path, *args: str) -> Any:
    """`inspect eval TASK_FILE --model openai-api/fake/policy ARGS` as the docs give it; the eval log."""
    assert fake.base_url
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(
        OPENREWARD_SESSION_URL=url,  # both of inspect-openreward's clients reach the server through it
        OPENREWARD_API_KEY=TOKEN,  # and both send it as X-API-Key: the server's token
        FAKE_API_KEY="sk-policy-0123456789",  # an openai-api/SERVICE model needs SERVICE_API_KEY
        FAKE_BASE_URL=fake.base_url,
    )
    command = [str(Path(sys.executable).parent / "inspect"), "eval", task_file.name]
    command += ["--model", "openai-api/fake/policy", "--log-dir", str(logs), "--display", "plain", *args]
    # From the task file's folder, as the docs run it: Inspect takes a task file by a relative path.
    done = subprocess.run(command, cwd=task_file.parent, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [log] = list_eval_logs(str(logs))
    return read_eval_log(log)


def test_inspect_openreward_scores_are_grades_rewards(module_fake: FakeOpenAI, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    task_file = tmp_path / "inspect_healthbench.py"
    task_file.write_text(doc_block("inspect_healthbench.py"), encoding="utf-8")
    assert module_fake.base_url
    # The solver sends no secrets: the server grades with its own key.
    with served(
        data, module_fake.base_url, env={"HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_SERVER_TOKEN": TOKEN}
    ) as url:
        log = inspect_eval(task_file, url, module_fake, tmp_path / "logs", "-T", "split=test")
    assert log.status == "success" and log.samples is not None and len(log.samples) == len(ROWS)
    rows = load_rows(data)
    replies, scores = {}, {}
    for sample in log.samples:
        row = rows[int(str(sample.id).removeprefix("test-"))]
        [user] = [m for m in sample.messages if m.role == "user"]
        assert user.text == answer_prompt_text(row.prompt)  # the variant's prompt reached the model
        [call] = [c for m in sample.messages if m.role == "assistant" for c in m.tool_calls or ()]
        assert call.function == "answer" and call.arguments == {"response": answer_reply(user.text)}
        replies[row.prompt_id] = call.arguments["response"]
        [score] = sample.scores.values()
        scores[row.prompt_id] = score.value
    graded = graded_by_cli(tmp_path, data, replies, module_fake.base_url)
    assert scores == pytest.approx({pid: record["score"] for pid, record in graded.items()}, abs=1e-9)
    assert len(set(scores.values())) > 1
