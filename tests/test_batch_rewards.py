"""The in-process batch rewards (`integrations.rewards`) and the two trainer layers over them, called as TRL and verl
call them (the frameworks themselves: tests/test_clients_trl_rewards.py and tests/test_verl.py): a step's rewards
are `healthbench grade`'s for the same replies, every item of the step is asked at once under serve's budget, an
unknown prompt_id and an ungradable reply are errors (or None in TRL), never a reward."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from healthbench.data.source import TaskSource
from healthbench.errors import GradingError, SettingsError, UnknownPromptId
from healthbench.integrations import verl as verl_rewards
from healthbench.integrations.rewards import BatchRewards, task_rows
from healthbench.integrations.trl import reward_function
from healthbench.testing import FakeOpenAI
from tests.conftest import write_jsonl
from tests.reference import KEY, made_up_rows
from tests.serving import UNGRADABLE, graded_by_cli

ROWS = made_up_rows()[:8]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "rows.jsonl", ROWS)


def replies(count: int = 2) -> list[tuple[str, str]]:
    """Two different replies to each task: a step's completions, grouped as GRPO groups them."""
    return [
        (row["prompt_id"], f"Reply {n} to {row['prompt_id']}: rest and fluids.") for row in ROWS for n in range(count)
    ]


def graded_scores(tmp: Path, data: Path, pairs: list[tuple[str, str]], url: str) -> list[float]:
    """`healthbench grade`'s score for each pair (a grade run per reply number, since a run grades a task once)."""
    scores: dict[tuple[str, str], float] = {}
    for n in range(2):
        chosen = {pid: reply for pid, reply in pairs if reply.startswith(f"Reply {n} ")}
        if not chosen:
            continue
        for pid, record in graded_by_cli(tmp, data, chosen, url, out=f"grade{n}").items():
            scores[pid, chosen[pid]] = record["score"]
    return [scores[pair] for pair in pairs]


def test_a_step_is_graded_as_grade_grades_every_item_at_once(data: Path, grader: FakeOpenAI, tmp_path: Path) -> None:
    rewards = BatchRewards(data)
    assert (rewards.concurrency, rewards.ceiling) == (256, 1024)  # serve's budget
    pairs = replies()
    got = asyncio.run(rewards.grade(pairs))
    assert grader.base_url
    assert [r.reward for r in got] == pytest.approx(graded_scores(tmp_path, data, pairs, grader.base_url), abs=1e-9)
    assert len({r.reward for r in got}) > 2
    assert all(r.axes and all(axis.startswith("axis:") for axis in r.axes) for r in got)
    assert grader.auth_headers and set(grader.auth_headers) == {f"Bearer {KEY}"}


def in_flight_each_step(rewards: BatchRewards, grader: FakeOpenAI, pairs: list[tuple[str, str]]) -> list[float]:
    """The share of a step's grader calls in flight at most, in each of two steps on one loop (a trainer's): the fake
    holds each call until the step's items are all in flight, or for 2 s (a round), so a step that sends its items
    at once has them all in flight together."""
    items = sum(len(row["rubrics"]) for row in ROWS) * 2
    most = []

    async def two_steps() -> None:
        grader.gathering.size, grader.gathering.patience = items, 2.0
        for step in range(2):
            grader.reset()
            await rewards.grade([(pid, f"{reply} {step}") for pid, reply in pairs])
            assert grader.requests_total == items
            most.append(grader.max_in_flight)

    try:
        asyncio.run(two_steps())
    finally:
        grader.gathering.size = None
    return [count / items for count in most]


def test_a_new_keys_first_step_asks_every_item_at_once_and_so_does_the_next(data: Path, grader: FakeOpenAI) -> None:
    # A fresh key (this fake's URL is new to the process) and a fake that names no limits: no slow start.
    assert in_flight_each_step(BatchRewards(data), grader, replies()) == [1.0, 1.0]


def test_the_grading_commands_slow_start_is_there_when_asked_for(
    data: Path, grader: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Twenty requests, then two more with each answer: the first step's items are never all in flight together;
    # the second step's are, the key's pace having seen answers.
    monkeypatch.setenv("HEALTHBENCH_GRADER_SLOW_START", "1")
    first, second = in_flight_each_step(BatchRewards(data), grader, replies())
    assert first < 1.0 and second == 1.0
    monkeypatch.setenv("HEALTHBENCH_GRADER_SLOW_START", "maybe")
    with pytest.raises(SettingsError, match="HEALTHBENCH_GRADER_SLOW_START"):
        BatchRewards(data)


def test_the_budget_comes_from_the_argument_else_the_environment(
    data: Path, grader: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEALTHBENCH_GRADER_CONCURRENCY", "512")
    assert (BatchRewards(data).concurrency, BatchRewards(data).ceiling) == (512, 512)
    assert BatchRewards(data, concurrency=32).ceiling == 32
    monkeypatch.setenv("HEALTHBENCH_GRADER_CONCURRENCY", "lots")
    with pytest.raises(SettingsError, match="HEALTHBENCH_GRADER_CONCURRENCY"):
        BatchRewards(data)
    with pytest.raises(SettingsError, match="concurrency"):
        BatchRewards(data, concurrency=0)


def test_rows_come_from_the_environment_once_per_process(
    data: Path, grader: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEALTHBENCH_DATA", str(data))
    # A string names a subset when it is one (as run.json names it too), else a file; a Path is a file.
    assert TaskSource.given("hard") == TaskSource.named("hard") == TaskSource.given("subset:hard")
    assert TaskSource.given(str(data)) == TaskSource.given(data) == TaskSource.file(data)
    assert task_rows() is task_rows(str(data)) is task_rows(data)  # one load for the same data
    assert set(BatchRewards().tasks.by_id) == {row["prompt_id"] for row in ROWS}


def test_a_split_restricts_the_rows_and_an_unknown_prompt_id_names_it_and_the_split(
    data: Path, grader: FakeOpenAI
) -> None:
    train = BatchRewards(data, split="train")
    held = BatchRewards(data, split="heldout")
    assert train.tasks.by_id and held.tasks.by_id and not set(train.tasks.by_id) & set(held.tasks.by_id)
    outside = next(iter(held.tasks.by_id))
    with pytest.raises(UnknownPromptId, match=rf"{outside}.*train"):
        asyncio.run(train.grade([(next(iter(train.tasks.by_id)), "fine"), (outside, "fine")]))
    assert grader.requests_total == 0  # refused before any grader call
    with pytest.raises(SettingsError, match="unknown split 'test'"):
        BatchRewards(data, split="test")


def test_an_ungradable_reply_has_no_reward_and_its_error_names_task_and_item(data: Path, grader: FakeOpenAI) -> None:
    pairs = [(ROWS[0]["prompt_id"], "fine"), (ROWS[1]["prompt_id"], f"{UNGRADABLE} reply")]
    got = asyncio.run(BatchRewards(data, grader_max_attempts=2).grade(pairs))
    assert got[0].reward is not None and got[1].reward is None
    assert got[1].error and ROWS[1]["prompt_id"] in got[1].error and "rubric item" in got[1].error
    assert KEY not in got[1].error


def test_trl_reward_function_returns_grades_scores_and_none_for_an_ungradable_completion(
    data: Path, grader: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    func = reward_function(data, grader_max_attempts=2)
    assert func.__name__ == "healthbench"
    pairs = replies(1)
    completions: list[Any] = [[{"role": "assistant", "content": reply}] for _, reply in pairs]
    completions[-1] = [{"role": "assistant", "content": f"{UNGRADABLE} reply"}]
    metrics: dict[str, float] = {}

    def log_metric(name: str, value: float) -> None:
        metrics[name] = value

    with caplog.at_level(logging.WARNING, "healthbench.integrations.trl"):
        got = asyncio.run(
            func(
                prompts=[[{"role": "user", "content": "q"}]] * len(pairs),
                completions=completions,
                completion_ids=[[1]] * len(pairs),
                prompt_id=[pid for pid, _ in pairs],
                log_metric=log_metric,
                trainer_state=None,
            )
        )
    assert got[-1] is None
    assert grader.base_url
    expected = graded_scores(tmp_path, data, pairs[:-1], grader.base_url)
    assert got[:-1] == pytest.approx(expected, abs=1e-9)
    assert pairs[-1][0] in caplog.text and "rubric item" in caplog.text
    assert metrics["healthbench/ungraded"] == 1 and "healthbench/completeness" in metrics


def test_trl_reward_function_refuses_a_dataset_without_prompt_ids(data: Path, grader: FakeOpenAI) -> None:
    func = reward_function(data)
    with pytest.raises(Exception, match="prompt_id column"):
        asyncio.run(func(prompts=["q"], completions=["a"], completion_ids=[[1]]))


def test_verl_batch_form_keeps_one_loop_and_matches_grade(data: Path, grader: FakeOpenAI, tmp_path: Path) -> None:
    pairs = replies()
    info = {"split": None, "index": 0, "data": str(data), "heldout": None, "seed": 0}
    scores = verl_rewards.compute_score_batch(
        data_sources=["healthbench"] * len(pairs),
        solution_strs=[reply for _, reply in pairs],
        ground_truths=[pid for pid, _ in pairs],
        extra_infos=[dict(info) for _ in pairs],
    )
    assert grader.base_url
    assert scores == pytest.approx(graded_scores(tmp_path, data, pairs, grader.base_url), abs=1e-9)
    loop = verl_rewards._daemon_loop()
    assert verl_rewards._daemon_loop() is loop and loop.is_running()
    assert any(thread.name == "healthbench-rewards" and thread.daemon for thread in threading.enumerate())
    with pytest.raises(GradingError, match=rf"task {ROWS[0]['prompt_id']}: rubric item"):
        verl_rewards.compute_score_batch(
            ["healthbench"], [f"{UNGRADABLE} reply"], [ROWS[0]["prompt_id"]], [dict(info)], grader_max_attempts=2
        )
    with pytest.raises(UnknownPromptId, match="no-such-task"):
        verl_rewards.compute_score_batch(["healthbench"], ["fine"], ["no-such-task"], [dict(info)])


def test_verl_reward_loop_form_is_a_coroutine_matching_grade(data: Path, grader: FakeOpenAI, tmp_path: Path) -> None:
    import inspect

    assert inspect.iscoroutinefunction(verl_rewards.compute_score)
    pairs = replies(1)
    info = {"split": None, "index": 0, "data": str(data), "heldout": None, "seed": 0}

    async def loop() -> list[float]:
        return list(
            await asyncio.gather(
                *(
                    verl_rewards.compute_score("healthbench", reply, pid, dict(info), reward_model_tokenizer=None)
                    for pid, reply in pairs
                )
            )
        )

    assert grader.base_url
    assert asyncio.run(loop()) == pytest.approx(graded_scores(tmp_path, data, pairs, grader.base_url), abs=1e-9)


def test_trl_reward_function_in_server_mode_gets_the_servers_rewards(
    data: Path, grader: FakeOpenAI, tmp_path: Path
) -> None:
    """Through `serve`'s `POST /rewards` (branch openrlhf's route): the server's key grades, the trainer has none."""
    pytest.importorskip("healthbench.integrations.openreward.batchroutes")
    pytest.importorskip("openreward")
    from healthbench.errors import DataError, EndpointUnusable
    from tests.serving import served

    token = "rewards-token-0123456789abcdef"
    train = sorted(task_rows(data, "train").by_id)
    pairs = [(pid, f"Reply 0 to {pid}: rest and fluids.") for pid in train[:3]]
    pairs.append((train[3], f"{UNGRADABLE} reply"))
    assert grader.base_url
    env = {"HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_SERVER_TOKEN": token}
    with served(data, grader.base_url, env=env) as url:
        func = reward_function(server_url=url, token=token, split="train")
        metrics: dict[str, float] = {}
        got = asyncio.run(
            func(
                prompts=["q"] * len(pairs),
                completions=[reply for _, reply in pairs],
                prompt_id=[pid for pid, _ in pairs],
                log_metric=metrics.__setitem__,
            )
        )
        held = next(iter(task_rows(data, "heldout").by_id))
        with pytest.raises(DataError, match=held):
            asyncio.run(func(prompts=["q"], completions=["fine"], prompt_id=[held]))
        with pytest.raises(EndpointUnusable, match="token"):
            asyncio.run(reward_function(server_url=url, token="wrong", split="train")(["q"], ["a"], prompt_id=[held]))
    assert got[-1] is None and metrics["healthbench/ungraded"] == 1
    assert got[:-1] == pytest.approx(graded_scores(tmp_path, data, pairs[:-1], grader.base_url), abs=1e-9)
