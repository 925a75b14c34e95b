"""TRL 1.16's `GRPOTrainer` in dataset mode with HealthBench's batch reward function (`integrations.trl`): one real
training step on the CPU with the tiny local policy, on a train split's rows in `export --format trl`'s shape (a
conversational `prompt` and a `prompt_id`), graded in-process by the fake grader. Every reward TRL logs is
`healthbench grade`'s for the same completion; a task whose items cannot be graded gets no reward (NaN in TRL's
table: left out, never a 0); a prompt_id outside the split stops the step, naming it and the split.

Runs where trl is installed (`.venv-clients`, made by `scripts/dev test`).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from healthbench.data.loading import load_rows
from healthbench.data.splits import assign_splits
from healthbench.errors import UnknownPromptId
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.serving import UNGRADABLE, graded_by_cli

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
trl = pytest.importorskip("trl")
pytest.importorskip("torch")
pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

REPLY = "Rest, drink plenty of fluids, and see a doctor if it is no better in three days."
GENERATIONS = 8  # a step: two tasks, eight completions each
# The tiny policy's every completion, as TRL hands it to the reward (its tool call, unparsed in dataset mode).
REPLY_TEXT = "<tool_call>\n" + json.dumps({"name": "answer", "arguments": {"response": REPLY}}) + "\n</tool_call>"


def rows_and_split(tmp: Path) -> tuple[Path, list[str], str]:
    """Rows of made-up tasks (one whose prompt no grader answers about), their file, two train tasks (the good one
    first, then the ungradable one) and a heldout one."""
    raw = [make_row(f"task-{i}", prompt=(("user", f"Question {i}: my head hurts."),)) for i in range(12)]
    loaded = load_rows(write_jsonl(tmp / "probe.jsonl", raw))
    splits = assign_splits(loaded)
    train = [row["prompt_id"] for row in raw if splits[row["prompt_id"]] == "train"][:2]
    heldout = next(row["prompt_id"] for row in raw if splits[row["prompt_id"]] == "heldout")
    for row in raw:
        if row["prompt_id"] == train[1]:
            row["prompt"] = [{"role": "user", "content": f"{UNGRADABLE}: my head hurts."}]
    return write_jsonl(tmp / "rows.jsonl", raw), train, heldout


def exported(tmp: Path, data: Path, prompt_ids: list[str]) -> Any:
    """The train split's tasks `prompt_ids`, written by `export --format trl`'s own writer to `tmp/train.jsonl` and
    loaded with `datasets` as a user loads the export."""
    from healthbench.data.source import TaskSource
    from healthbench.integrations.export import export_split

    rows = {row.prompt_id: row for row in load_rows(data)}
    path = export_split([rows[pid] for pid in prompt_ids], "train", "trl", tmp, TaskSource.file(data))
    return datasets.load_dataset("json", data_files=str(path), split="train")


def trainer_for(tmp: Path, dataset: Any, reward: Any) -> Any:
    from healthbench.testing.policy import tiny_policy

    policy = tiny_policy(tmp / "policy", REPLY)
    args = trl.GRPOConfig(
        output_dir=str(tmp / "grpo"),
        per_device_train_batch_size=2 * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=64,
        max_steps=1,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    return trl.GRPOTrainer(model=str(policy), args=args, train_dataset=dataset, reward_funcs=[reward])


def test_a_grpo_step_in_dataset_mode_gets_grades_rewards(grader: FakeOpenAI, tmp_path: Path) -> None:
    from healthbench.integrations.trl import reply_text, reward_function

    data, train, _ = rows_and_split(tmp_path)
    reward = reward_function(data, split="train", grader_max_attempts=2)
    trainer = trainer_for(tmp_path, exported(tmp_path, data, train), reward)
    trainer.train()
    logs = trainer._logs
    prompts = [messages[-1]["content"] for messages in logs["prompt"]]
    replies = [reply_text(completion) for completion in logs["completion"]]
    rewards = list(logs["rewards"]["healthbench"])
    assert len(rewards) == 2 * GENERATIONS
    good = [i for i, prompt in enumerate(prompts) if UNGRADABLE not in prompt]
    bad = [i for i, prompt in enumerate(prompts) if UNGRADABLE in prompt]
    assert len(good) == len(bad) == GENERATIONS
    assert all(math.isnan(rewards[i]) for i in bad)  # None: left out of the step, never a 0
    assert grader.base_url
    by_reply = {replies[i]: train[0] for i in good}
    graded = {}
    for n, reply in enumerate(by_reply):
        graded[reply] = graded_by_cli(tmp_path, data, {train[0]: reply}, grader.base_url, out=f"grade{n}")[train[0]]
    assert [rewards[i] for i in good] == pytest.approx([graded[replies[i]]["score"] for i in good], abs=1e-6)
    # TRL's table holds float32; the function itself returns grade's float exactly (tests/test_batch_rewards.py).
    [logged] = [entry for entry in trainer.state.log_history if "healthbench/ungraded" in entry]
    assert logged["healthbench/ungraded"] == GENERATIONS
    axes = {f"healthbench/{name.removeprefix('axis:')}" for name in graded[replies[good[0]]]["metrics"]}
    counts = {"healthbench/ungraded", "healthbench/grader_calls", "healthbench/reused_calls"}
    means = {name for name in logged if name.startswith("healthbench/") and name not in counts}
    assert means and means <= axes
    # The same completion text more than once in the step is graded once: its other copies reuse its verdicts.
    items = len(graded[replies[good[0]]]["rubric_items"])
    assert logged["healthbench/grader_calls"] == items * len(by_reply)
    assert logged["healthbench/grader_calls"] + logged["healthbench/reused_calls"] == items * GENERATIONS


def test_a_prompt_id_outside_the_split_stops_the_step_naming_it(grader: FakeOpenAI, tmp_path: Path) -> None:
    from healthbench.integrations.trl import reward_function

    data, train, heldout = rows_and_split(tmp_path)
    reward = reward_function(data, split="train")
    trainer = trainer_for(tmp_path, exported(tmp_path, data, [train[0], heldout]), reward)
    with pytest.raises(UnknownPromptId, match=rf"{heldout}.*'train'"):
        trainer.train()
    assert grader.requests_total == 0


TRAINING_DOC = Path(__file__).parents[1] / "docs" / "training.md"


def test_the_documented_dataset_mode_recipe_trains_on_the_cpu(
    grader: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/training.md's TRL recipe as written, on an export of the train split, with the tiny policy."""
    from healthbench.testing.policy import tiny_policy

    data, train, _ = rows_and_split(tmp_path)
    exported(tmp_path, data, [train[0], train[0]])  # two rows of the good task: a step of 16 completions
    blocks = re.findall(r"```python\n(.*?)```", TRAINING_DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    [recipe] = [block for block in blocks if block.startswith("# train_grpo_dataset.py:")]
    monkeypatch.setenv("POLICY_MODEL", str(tiny_policy(tmp_path / "policy", REPLY)))
    monkeypatch.setenv("TRAIN_FILE", str(tmp_path / "train.jsonl"))
    monkeypatch.setenv("HEALTHBENCH_DATA", str(data))
    monkeypatch.setenv("MAX_STEPS", "1")
    monkeypatch.setenv("MAX_COMPLETION_LENGTH", "64")
    monkeypatch.chdir(tmp_path)  # its output_dir
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(recipe, str(TRAINING_DOC), "exec"), namespace)
    [step] = [entry for entry in namespace["trainer"].state.log_history if "rewards/healthbench/mean" in entry]
    assert grader.base_url
    score = graded_by_cli(tmp_path, data, {train[0]: REPLY_TEXT}, grader.base_url)[train[0]]["score"]
    assert step["rewards/healthbench/mean"] == pytest.approx(score, abs=1e-6)
    assert step["healthbench/ungraded"] == 0
