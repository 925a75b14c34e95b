"""verl 0.9.1 serving the judge itself (`reward.reward_model.enable=True`), with HealthBench's reward file: verl's
trainer config composed from its own `ppo_trainer.yaml` with the overrides docs/training.md gives, verl's reward
model manager starting verl's router (`NaiveRouter`, a FastAPI proxy, in a process of its own) in front of two fake
judges, and verl's reward loop calling `compute_score(..., reward_router_address="HOST:PORT",
reward_model_tokenizer=...)` as it does: in this process (`RewardLoopWorker`), and in two reward workers that are Ray
actors (`RewardLoopManager`, Ray on the CPU) sharing the judge's pace through a real Redis. No grader URL or key is
in the environment: every grader call goes through the router, with the model the judges list, and every score is
`healthbench grade`'s for the same reply.

The one part of verl replaced is what needs GPUs: the vLLM or SGLang servers the manager would start
(`RewardModelManager._initialize_llm_servers`) are the fakes, already running.

Runs where verl is installed (`.venv-verl`, made by `scripts/dev test`, with the router's FastAPI and uvicorn, which
verl gets from vLLM or SGLang, and the pace store's Redis client); Ray starts a local cluster of two CPUs for the
second test and is shut down after it.
"""

from __future__ import annotations

import importlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from healthbench.api.keygates import key_slot
from healthbench.integrations.rewards import close_graders
from healthbench.integrations.verl import judge_url
from healthbench.testing import FakeOpenAI
from tests.redisserver import RedisServer, needs_redis
from tests.serving import graded_by_cli
from tests.test_verl_judge_address import JUDGE, address

verl = pytest.importorskip("verl")
ray = pytest.importorskip("ray")
hydra = pytest.importorskip("hydra")
pytest.importorskip("fastapi")  # verl's router's, which verl does not declare (vLLM and SGLang bring it)
pytest.importorskip("uvicorn")
# After the skips: this module needs verl (and torch, pandas) where it is imported.
from tests.test_verl import REPLIES, batch, exported, reward_file, tokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_grader")

T = TypeVar("T")
CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"
LATENCY = 1.0  # seconds a judge takes: long enough that a step's calls overlap at the router, whatever the load
ROUTER_WAIT = 60.0  # seconds verl's router may take to listen once its process has started
STEP_WAIT = 400.0  # seconds two Ray workers may take to start (each imports torch and verl) and grade a step


def trainer_config(folder: Path, *more: str) -> Any:
    """verl's trainer config as `python -m verl.trainer.main_ppo` composes it (hydra, verl's `ppo_trainer.yaml`) with
    the overrides that name HealthBench and a judge served in the cluster, as docs/training.md gives them: the
    policy's tokenizer and the judge's are tiny ones saved in `folder` (verl loads both; nothing is downloaded)."""
    overrides = [
        f"actor_rollout_ref.model.path={folder / 'policy'}",
        "reward.reward_model.enable=True",
        f"reward.reward_model.model_path={folder / 'judge'}",
        "reward.reward_model.rollout.name=vllm",
        f"reward.custom_reward_function.path={reward_file()}",
        "reward.custom_reward_function.name=compute_score",
        "+reward.custom_reward_function.reward_kwargs.grader_max_attempts=2",
        *more,
    ]
    with hydra.initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra.compose("ppo_trainer", overrides=overrides)


class Judges:
    """Two fake judges serving `JUDGE`, and the processes of verl's routers started in front of them."""

    def __init__(self) -> None:
        self.fakes = (FakeOpenAI(models=(JUDGE,), latency=LATENCY), FakeOpenAI(models=(JUDGE,), latency=LATENCY))
        self.routers: list[Any] = []

    def manager(self) -> type[Any]:
        """verl's `RewardModelManager` with these judges as the servers it would start on GPUs: the rest is
        verl's own, its router's start (`_initialize_router`, `launch_router_process`) included."""
        fakes = self.fakes
        base = importlib.import_module("verl.experimental.reward_loop.reward_model").RewardModelManager

        class ServedJudges(base):  # type: ignore[misc, valid-type]
            def _initialize_llm_servers(self) -> None:
                self.rollout_replicas: list[Any] = []  # nothing to wake up or put to sleep
                self.server_addresses = [address(fake) for fake in fakes]

        return ServedJudges

    def calls(self) -> list[int]:
        return [fake.requests_total for fake in self.fakes]


@pytest.fixture
def judges(monkeypatch: pytest.MonkeyPatch) -> Iterator[Judges]:
    """Two fake judges running; every router verl starts meanwhile is stopped at the end (verl keeps no handle)."""
    naive_router = importlib.import_module("verl.experimental.reward_loop.router.naive_router")
    launch = naive_router.launch_router_process
    found = Judges()

    def recorded(worker_urls: list[str]) -> tuple[str, Any]:
        router_address, process = launch(worker_urls=worker_urls)
        found.routers.append(process)
        return router_address, process

    monkeypatch.setattr(naive_router, "launch_router_process", recorded)
    for fake in found.fakes:
        fake.start()
    try:
        yield found
    finally:
        for process in found.routers:
            process.terminate()
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()
        for fake in found.fakes:
            fake.stop()


def listening(router_address: str) -> str:
    """`router_address` once verl's router accepts connections there (verl only waits three seconds after
    starting its process), within `ROUTER_WAIT` seconds."""
    host, port = router_address.rsplit(":", 1)
    deadline = time.monotonic() + ROUTER_WAIT
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
                return router_address
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"verl's router at {router_address} did not listen within {ROUTER_WAIT:g} s")
        time.sleep(0.05)  # polling for the router to listen, not timing anything


# Eight rollouts of one task, a GRPO group, each its own text: the trainers' rewards grade an identical text once.
GROUP = [f"{reply} (rollout {n})" for n in range(4) for reply in REPLIES]


def as_grade(tmp: Path, data: Path, prompt_id: str) -> list[float]:
    """`healthbench grade`'s score for each reply of `GROUP` to task `prompt_id`, graded by `JUDGE` on a fake of its
    own (a run grades a task once: a run per reply)."""
    flags = ("--grader-model", JUDGE)
    with FakeOpenAI() as reference:
        assert reference.base_url
        url = reference.base_url
        found = [graded_by_cli(tmp, data, {prompt_id: reply}, url, f"grade{n}", flags) for n, reply in enumerate(GROUP)]
    return [one[prompt_id]["score"] for one in found]


def judged_as_verl_serves_it(judges: Judges, replies: int, workers: int) -> None:
    """Every grader call went through the router to the judges (both of them), named the model they list (asked
    once per process), carried no key, and each reply's items were asked once."""
    assert all(calls > 0 for calls in judges.calls()), judges.calls()
    assert sum(judges.calls()) == replies * 2  # `exported`'s rows have two rubric items
    assert sum(fake.models_listed for fake in judges.fakes) == workers
    assert {body["model"] for fake in judges.fakes for body in fake.bodies} == {JUDGE}
    assert {header for fake in judges.fakes for header in fake.auth_headers} == {None}


def test_the_reward_loop_grades_through_verls_router_as_grade(judges: Judges, tmp_path: Path) -> None:
    reward_loop_worker = importlib.import_module("verl.experimental.reward_loop.reward_loop").RewardLoopWorker

    data, parquet, train, _ = exported(tmp_path)
    tok = tokenizer(tmp_path / "policy")
    tokenizer(tmp_path / "judge")
    config = trainer_config(tmp_path)
    router = listening(judges.manager()(config.reward.reward_model).get_router_address())
    # As `RewardLoopManager` makes each of its workers: the config and the router's address.
    worker = reward_loop_worker(config, router)
    assert worker.reward_model_tokenizer is not None  # passed to the reward file with the address
    replies = [(train[0], reply) for reply in GROUP]

    async def scored(proto: Any) -> list[dict[str, Any]]:
        return list(await worker.compute_score_batch(proto))

    outputs = worker.loop.run_until_complete(scored(batch(parquet, replies, tok)))
    worker.loop.run_until_complete(close_graders())  # a Ray worker's loop lives as long as its process
    judged_as_verl_serves_it(judges, len(replies), workers=1)
    scores = as_grade(tmp_path, data, train[0])
    assert [output["reward_score"] for output in outputs] == pytest.approx(scores, abs=1e-9)


@needs_redis
@pytest.mark.timeout(STEP_WAIT + 200)  # past the step's own bound, so that Ray and the router are always shut down
def test_two_ray_reward_workers_grade_through_the_router_sharing_its_pace(
    judges: Judges, redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis_client = pytest.importorskip("redis")  # the pace store's client (the `redis` extra)
    reward_loop = importlib.import_module("verl.experimental.reward_loop.reward_loop")

    data, parquet, train, _ = exported(tmp_path)
    tok = tokenizer(tmp_path / "policy")
    tokenizer(tmp_path / "judge")
    config = trainer_config(tmp_path, "reward.num_workers=2")
    # What Ray's workers inherit from this process: the store, and no reaching the Hub.
    monkeypatch.setenv("HEALTHBENCH_PACE_STORE", redis.url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(reward_loop, "RewardModelManager", judges.manager())
    replies = [(train[0], reply) for reply in GROUP]
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        manager = reward_loop.RewardLoopManager(config)  # verl's: the router, then two reward workers as actors
        router = listening(manager.reward_router_address)
        result = within(STEP_WAIT, lambda: manager.compute_rm_score(batch(parquet, replies, tok)))
        pids = {ray.get(actor.__ray_call__.remote(lambda self: os.getpid())) for actor in manager.reward_loop_workers}
    finally:
        ray.shutdown()
    judged_as_verl_serves_it(judges, len(replies), workers=2)
    # Both workers paced the judge's one keyless slot through the store, each as a process of its own.
    slot = key_slot(judge_url(router), None)
    members = redis_client.Redis.from_url(redis.url).zrange(f"healthbench:pace:{{{slot}}}:processes", 0, -1)
    assert {int(member.decode().split("-")[0]) for member in members} == pids
    assert len(pids) == 2
    scores = as_grade(tmp_path, data, train[0])
    # verl's rm_scores put each reply's score on its last token, as float32.
    assert result.batch["rm_scores"].sum(dim=1).tolist() == pytest.approx(scores, abs=1e-6)


def within(seconds: float, work: Callable[[], T]) -> T:
    """`work()`'s value, or a failure after `seconds` (verl's own wait on its Ray workers has no bound)."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # handed to the test's thread, which raises it
            failure.append(exc)

    thread = threading.Thread(target=run, name="verl-step", daemon=True)
    thread.start()
    thread.join(seconds)
    if failure:
        raise failure[0]
    if not outcome:
        pytest.fail(f"verl's reward loop did not score the step within {seconds:g} s")
    return outcome[0]
