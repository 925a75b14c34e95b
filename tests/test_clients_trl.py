"""TRL 1.16's OpenReward integration, unmodified, against `healthbench serve`: what `GRPOTrainer` does with an
`OpenRewardSpec` in a rollout (the dataset, the environment factory, `reset`, the model's tool call, the reward
function), with a model that calls `answer`; and the recipe of docs/integrations.md as written, a real
`GRPOTrainer` training on the CPU with a tiny local model. Every reward equals `healthbench grade`'s for the same
reply.

Runs where trl is installed (`.venv-clients`, made by `scripts/dev test`; trl without its dependencies, as its
OpenReward integration needs none, and torch (CPU), transformers and accelerate, pinned there, for the trainer).
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from healthbench.data.loading import load_rows
from healthbench.data.splits import split_rows
from healthbench.integrations.openreward.deployment import answer_prompt_text
from healthbench.testing import FakeOpenAI
from healthbench.testing.agent import answer_reply
from tests.reference import KEY, made_up_rows
from tests.serving import DOC, doc_block, graded_by_cli, served

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # the integration warns that it is experimental
trl_openreward = pytest.importorskip("trl.experimental.openreward")

ROWS = made_up_rows()[:6]
TOKEN = "trl-token-0123456789abcdef"  # the server's token, where a test serves with one


def tool_schema(method: Any) -> dict[str, Any]:
    """The OpenAI tool a chat template shows the model for an environment method (what transformers'
    `get_json_schema` reads from its signature and docstring), enough for the fake to see the name."""
    parameters = [name for name in inspect.signature(method).parameters]
    properties = {name: {"type": "string"} for name in parameters}
    description = (method.__doc__ or "").split("\n\n")[0]
    schema = {"type": "object", "properties": properties, "required": parameters}
    return {"type": "function", "function": {"name": method.__name__, "description": description, "parameters": schema}}


async def model_turn(base_url: str, prompt: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The policy's turn: one chat completion from the fake, as GRPOTrainer's generation would give it."""
    body = {"model": "policy", "messages": prompt, "tools": tools}
    async with aiohttp.ClientSession() as http, http.post(f"{base_url}/chat/completions", json=body) as response:
        assert response.status == 200, await response.text()
        message: dict[str, Any] = (await response.json())["choices"][0]["message"]
        return message


def rollouts(url: str, fake: FakeOpenAI, **spec_options: Any) -> dict[str, Any]:
    """GRPOTrainer's use of the spec, step by step (trl/trainer/grpo_trainer.py): two rollout slots from the
    factory, each example `reset` into one, the model's tool calls run on it, the reward function over the batch."""
    import asyncio

    assert fake.base_url
    spec = trl_openreward.OpenRewardSpec(url, split="test", secrets={"OPENAI_API_KEY": KEY}, **spec_options)
    dataset = spec.train_dataset
    slots = [spec.environment_factory() for _ in range(2)]
    seen: dict[str, Any] = {"prompts": {}, "rewards": {}, "again": []}
    try:
        # The trainer's tool collection: the environment's public methods other than reset and get_reward.
        names = [
            name
            for name, _ in inspect.getmembers(type(slots[0]), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")
        ]
        seen["tools"] = names
        for start in range(0, len(dataset), len(slots)):
            batch = [dataset[i] for i in range(start, min(start + len(slots), len(dataset)))]
            for example, environment in zip(batch, slots, strict=False):
                observation = environment.reset(**example)
                prompt = [{**example["prompt"][-1], "content": example["prompt"][-1]["content"] + observation}]
                seen["prompts"][example["prompt_id"]] = prompt[-1]["content"]
                methods = {name: getattr(environment, name) for name in names}
                message = asyncio.run(model_turn(fake.base_url, prompt, [tool_schema(m) for m in methods.values()]))
                for call in message.get("tool_calls") or ():
                    function = call["function"]
                    methods[function["name"]](**json.loads(function["arguments"]))
                seen["again"].append(methods["answer"](response="a second answer") if "answer" in methods else None)
            rewards = spec.reward_funcs(prompts=None, completions=None, environments=slots[: len(batch)])
            for example, reward in zip(batch, rewards, strict=True):
                seen["rewards"][example["prompt_id"]] = reward
    finally:
        for environment in slots:
            environment._close()
    return seen


def check(seen: dict[str, Any], data: Path, fake: FakeOpenAI, tmp: Path) -> None:
    """The variant was reached and every reward is `grade`'s for the reply the model submitted."""
    from healthbench.data.loading import load_rows

    assert seen["tools"] == ["answer"]
    rows = {row.prompt_id: row for row in load_rows(data)}
    assert seen["prompts"] == {pid: answer_prompt_text(row.prompt) for pid, row in rows.items()}
    assert all(again.startswith("Error: episode_finished") for again in seen["again"])
    assert fake.base_url
    replies = {pid: answer_reply(prompt) for pid, prompt in seen["prompts"].items()}
    graded = graded_by_cli(tmp, data, replies, fake.base_url)
    assert seen["rewards"] == pytest.approx({pid: record["score"] for pid, record in graded.items()}, abs=1e-9)
    assert len(set(seen["rewards"].values())) > 1


def test_grpo_rollouts_through_env_name_get_grades_rewards(
    data: Path, module_fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert module_fake.base_url
    # A server with a token: the spec's api_key is what TRL's SDK client sends as X-API-Key.
    with served(data, module_fake.base_url, env={"HEALTHBENCH_SERVER_TOKEN": TOKEN}) as url:
        monkeypatch.setenv("OPENREWARD_SESSION_URL", url)  # TRL's sessions go to the hosted service otherwise
        with pytest.raises(Exception, match="needs its token"):
            trl_openreward.OpenRewardSpec(url, env_name="healthbench_answer", split="test").train_dataset  # noqa: B018
        seen = rollouts(url, module_fake, env_name="healthbench_answer", api_key=TOKEN)
    check(seen, data, module_fake, tmp_path)


def test_grpo_rollouts_naming_no_environment_reach_a_default_variant(
    data: Path, module_fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert module_fake.base_url
    env = {"HEALTHBENCH_SERVER_TOKEN": TOKEN}
    with served(data, module_fake.base_url, "--default-environment", "healthbench_answer", env=env) as url:
        monkeypatch.setenv("OPENREWARD_SESSION_URL", url)
        monkeypatch.setenv("OPENREWARD_API_KEY", TOKEN)  # no api_key given: TRL's SDK client reads this one
        seen = rollouts(url, module_fake, num_tasks=len(ROWS))
    check(seen, data, module_fake, tmp_path)


def test_a_mistyped_env_name_is_an_error_naming_the_variant(
    data: Path, module_fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert module_fake.base_url
    with served(data, module_fake.base_url) as url:
        monkeypatch.setenv("OPENREWARD_SESSION_URL", url)
        spec = trl_openreward.OpenRewardSpec(url, env_name="healthbench-answer", split="test", num_tasks=2)
        with pytest.raises(Exception, match=r"'healthbench-answer'.*'healthbench_answer'"):
            spec.train_dataset  # noqa: B018  # the first request: TRL's task listing


def test_the_documented_recipe_trains_on_the_cpu_with_grades_rewards(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from healthbench.testing.policy import tiny_policy

    policy = tiny_policy(tmp_path / "policy", REPLY)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the policy is a local folder: nothing is fetched
    # The trainer's environment has no grader key (the recipe once stopped with a KeyError): the server's applies.
    monkeypatch.delenv("HEALTHBENCH_GRADER_API_KEY", raising=False)
    monkeypatch.setenv("POLICY_MODEL", str(policy))
    monkeypatch.setenv("NUM_TASKS", "2")
    monkeypatch.setenv("MAX_STEPS", "2")
    monkeypatch.chdir(tmp_path)  # its output_dir
    with FakeOpenAI() as grader:
        assert grader.base_url
        with served(
            data, grader.base_url, env={"HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_SERVER_TOKEN": TOKEN}
        ) as url:
            monkeypatch.setenv("OPENREWARD_SESSION_URL", url)
            monkeypatch.setenv("OPENREWARD_API_KEY", TOKEN)  # the recipe passes it as the spec's api_key
            recipe: dict[str, Any] = {"__name__": "__main__"}
            exec(compile(doc_block("train_grpo.py"), str(DOC), "exec"), recipe)
        assert set(grader.auth_headers) == {f"Bearer {KEY}"}
        # The recipe trains on the train split: its first two tasks are the two steps'.
        trained = split_rows(load_rows(data), "train")[:2]
        graded = graded_by_cli(tmp_path, data, {row.prompt_id: REPLY for row in trained}, grader.base_url)
    steps = [entry for entry in recipe["trainer"].state.log_history if "reward" in entry]
    assert len(steps) == 2 and all(entry["tools/call_frequency"] == 1 for entry in steps)
    # Each step is one task's 8 rollouts, all with the same reply: its mean reward is that task's score, spread 0.
    scores = sorted(record["score"] for record in graded.values())
    assert sorted(entry["reward"] for entry in steps) == pytest.approx(scores, abs=1e-6)
    assert [entry["reward_std"] for entry in steps] == pytest.approx([0, 0], abs=1e-6) and scores[0] != scores[1]
    assert recipe["slots"] and all(slot._session is None for slot in recipe["slots"])  # every session closed


REPLY = "Rest, drink plenty of fluids, and see a doctor if it is no better in three days."
