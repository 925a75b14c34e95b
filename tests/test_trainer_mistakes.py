"""A trainer's mistakes answered loudly, and nothing paid twice or for nobody (issue 45, items 1, 3, 4 and 5), tried
with the inputs a new user gives: TRL's reward function and verl's reward file called as the trainers call them,
`serve`'s `/rewards` and `/openrlhf` through real HTTP against a served process.

- What is not a reply (None, a number, an empty list of messages) is refused with the same error on every path,
  before any grader call, and a reply is bounded by the one setting of the same default `serve` has, named in the
  error.
- A request whose client has gone stops its grading; a sample sent again (OpenRLHF's resend after its timeout), or
  twice in a step, reuses the verdicts already paid for, counted as reused in the log; a session never reuses.
- Every refused trainer request leaves one log line naming what and why; TRL's server mode raises with the
  server's own explanation.
- Settings are checked when the reward function or file is set up: an endpoint that is not a URL, no key for
  OpenAI's grader, a misspelled setting (in verl's `reward_kwargs` as in TRL's arguments).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytest.importorskip("openreward")

from healthbench.data.schema import Row
from healthbench.data.splits import split_rows
from healthbench.errors import DataError, NotAReply, OverLimit, RequestFailed, SettingsError
from healthbench.grading.settings import GraderConfig
from healthbench.integrations import verl as verl_rewards
from healthbench.integrations.openreward.access import ServeLimits
from healthbench.integrations.openreward.deployment import Deployment
from healthbench.integrations.rewards import BatchRewards
from healthbench.integrations.trl import reward_function
from healthbench.testing import FakeOpenAI
from tests.conftest import Serving, make_row
from tests.reference import KEY
from tests.serving import graded_by_cli, log_until_marker, served_with_log, strip_colour

# Made-up tasks of six rubric items each, so a reply's grading is six grader calls.
ITEMS = 6
ROWS = [
    make_row(
        f"task-{i}",
        prompt=(("user", f"Question {i}: my knee hurts after running."),),
        rubrics=tuple((j + 1, f"Criterion {j} of task {i}", ("axis:accuracy", "level:example")) for j in range(ITEMS)),
    )
    for i in range(10)
]
IDS = [row["prompt_id"] for row in ROWS]
TRAIN = [row.prompt_id for row in split_rows([Row.model_validate(row) for row in ROWS], "train")]
TOKEN = "token-m-0f1e2d3c4b5a69788796a5b4"
AUTH = {"X-API-Key": TOKEN}
MOST = 4  # the module server's --max-batch-size
SERVING = Serving(
    token_file=TOKEN + "\n",
    flags=("--max-batch-size", str(MOST)),
    env={"HEALTHBENCH_GRADER_API_KEY": KEY},
    not_in_output=(TOKEN,),
)
NOT_REPLIES: list[Any] = [None, 42, []]
PROMPT = "<|im_start|>user\nMy knee hurts.<|im_end|>\n<|im_start|>assistant\n"
INFO = {"split": None, "index": 0, "heldout": None, "seed": 0}


async def post(url: str, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.post(url + path, json=body, headers=headers) as response:
        return response.status, json.loads(await response.text())


def until(condition: Callable[[], bool], what: str, within: float = 60.0) -> None:
    """Wait for a state (never for a time): `condition` checked every 10 ms, for at most `within` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"never came: {what}"
        time.sleep(0.01)


async def reached(condition: Callable[[], bool], what: str, within: float = 60.0) -> None:
    """`until` on an event loop: the loop runs while the state is waited for."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"never came: {what}"
        await asyncio.sleep(0.01)


def expected_error(index: int, prompt_id: str, given: Any) -> str:
    return str(NotAReply(index, prompt_id, given))


# --- item 1: what is not a reply, and a reply's length --------------------------------------------------------------


def test_what_is_not_a_reply_is_refused_alike_in_trl_and_verl(data: Path, grader: FakeOpenAI) -> None:
    trl_reward = reward_function(data)
    info = INFO | {"data": str(data)}
    for given in NOT_REPLIES:
        said = expected_error(0, IDS[0], given)
        assert "is not a reply" in said
        with pytest.raises(NotAReply) as trl_error:
            asyncio.run(trl_reward(prompts=["q"], completions=[given], prompt_id=[IDS[0]]))
        with pytest.raises(NotAReply) as batch_error:
            verl_rewards.compute_score_batch(["healthbench"], [given], [IDS[0]], [info])
        with pytest.raises(NotAReply) as loop_error:
            asyncio.run(verl_rewards.compute_score("healthbench", given, IDS[0], info))
        assert str(trl_error.value) == str(batch_error.value) == str(loop_error.value) == said
    # Named by its place in the step: the second completion of three.
    with pytest.raises(NotAReply, match=rf"^reply 1 \(task {IDS[1]}\) is not a reply: None"):
        asyncio.run(trl_reward(prompts=["q"] * 3, completions=["Rest.", None, "Ice."], prompt_id=IDS[:3]))
    assert grader.requests_total == 0  # refused before any grader call


def test_what_is_not_a_reply_is_refused_alike_by_the_batch_routes(
    server: tuple[str, list[str]], module_fake: FakeOpenAI
) -> None:
    url, _ = server
    module_fake.reset()
    for given in NOT_REPLIES:
        said = expected_error(0, TRAIN[0], given)
        rewards = {"split": "train", "items": [{"prompt_id": TRAIN[0], "reply": given}]}
        status, answer = asyncio.run(post(url, "/rewards", rewards, AUTH))
        assert (status, answer["detail"]) == (400, said)
        body = {"query": [given], "prompts": [PROMPT], "labels": [TRAIN[0]]}
        status, answer = asyncio.run(post(url, "/openrlhf", body, AUTH))
        assert (status, answer["detail"]) == (400, said)
    assert module_fake.requests_total == 0


def test_a_reply_is_bounded_in_process_as_serve_bounds_it(
    data: Path, grader: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    assert BatchRewards(data).reply_chars == ServeLimits().reply_chars == 50_000
    megabyte = "Rest. " * 200_000  # a 1.2 MB completion
    with caplog.at_level(logging.WARNING, "healthbench.integrations.trl"):
        got = asyncio.run(reward_function(data)(prompts=["q"], completions=[megabyte], prompt_id=[IDS[0]]))
    assert got == [None]
    assert "more than is graded: at most 50,000 (`max_reply_chars`)" in caplog.text
    info = INFO | {"data": str(data)}
    with pytest.raises(OverLimit, match=r"at most 50,000 \(`max_reply_chars`\)"):
        verl_rewards.compute_score_batch(["healthbench"], [megabyte], [IDS[0]], [info])
    # The same setting, lowered, in either trainer.
    assert (
        asyncio.run(reward_function(data, max_reply_chars=10)(["q"], ["Rest and ice, then see"], prompt_id=[IDS[0]]))[0]
        is None
    )
    with pytest.raises(OverLimit, match=r"at most 10 \(`max_reply_chars`\)"):
        asyncio.run(
            verl_rewards.compute_score("healthbench", "Rest and ice, then see", IDS[0], info, max_reply_chars=10)
        )
    assert grader.requests_total == 0
    with pytest.raises(SettingsError, match="`max_reply_chars` is 0"):
        reward_function(data, max_reply_chars=0)


# --- item 5: settings checked at set-up -------------------------------------------------------------------------


def test_bad_settings_fail_when_the_reward_is_set_up(
    data: Path, grader: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = INFO | {"data": str(data)}
    with pytest.raises(SettingsError, match="endpoint 'notaurl' is not a URL") as trl_error:
        reward_function(data, grader_base_url="notaurl")
    with pytest.raises(SettingsError) as verl_error:
        asyncio.run(verl_rewards.compute_score("healthbench", "Rest.", IDS[0], info, grader_base_url="notaurl"))
    assert str(trl_error.value) == str(verl_error.value)
    # A misspelled setting: refused by both trainers' rewards, with the same words and the setting it is close to.
    with pytest.raises(SettingsError, match=r"`grader_modle` is no setting .*did you mean `grader_model`") as trl_error:
        reward_function(data, grader_modle="gpt-4.1")
    with pytest.raises(SettingsError) as verl_error:
        verl_rewards.compute_score_batch(["healthbench"], ["Rest."], [IDS[0]], [info], grader_modle="gpt-4.1")
    assert str(trl_error.value) == str(verl_error.value)
    # What verl passes of its own is no setting of the user's: not refused (the reply, over the bound given, is).
    with pytest.raises(OverLimit):
        asyncio.run(
            verl_rewards.compute_score(
                "healthbench", "Rest.", IDS[0], info, reward_model_tokenizer=None, max_reply_chars=1
            )
        )
    with pytest.raises(SettingsError, match="`data` is no setting of verl's reward_kwargs"):
        verl_rewards.compute_score_batch(["healthbench"], ["Rest."], [IDS[0]], [info], data=str(data))
    # OpenAI's grader (no endpoint named) and no key anywhere: refused now, not at the first step's 401.
    for name in ("HEALTHBENCH_GRADER_BASE_URL", "HEALTHBENCH_GRADER_API_KEY", "OPENAI_API_KEY", "CHAT_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CHAT_BASE_URL", raising=False)
    with pytest.raises(SettingsError, match=r"no grader key, and the grader .* at https://api\.openai\.com/v1"):
        reward_function(data)
    with pytest.raises(SettingsError, match="`server_url` 'reward-host:8080' is not a URL"):
        reward_function(server_url="reward-host:8080", split="train")


# --- item 4: every refusal said in the log; TRL's server mode says the server's words ---------------------------


def test_every_refused_trainer_request_leaves_one_log_line(server: tuple[str, list[str]]) -> None:
    url, lines = server
    start = len(lines)
    good = {"query": [PROMPT + "Rest."], "prompts": [PROMPT], "labels": [TRAIN[0]]}
    refused = [
        ("/openrlhf", good | {"labels": ["no-such-task"]}, "'no-such-task' is not in split 'train'"),
        ("/openrlhf?split=dev", good, "no split 'dev' here"),
        ("/openrlhf", good | {"query": ["Rest."]}, "its query does not start with its prompt"),
        ("/openrlhf", good | {"labels": [TRAIN[0], TRAIN[1]]}, "differ in length"),
        ("/openrlhf", {key: value * (MOST + 1) for key, value in good.items()}, "--max-batch-size"),
        ("/openrlhf", good | {"query": [None]}, "is not a reply"),
        ("/openrlhf", {"query": ["x"]}, "prompts: Field required"),
        ("/rewards", {"split": "dev", "items": []}, "no split 'dev' here"),
        ("/rewards", {"items": [{"prompt_id": "no-such-task", "reply": "Rest."}]}, "'no-such-task' is not in split"),
        ("/rewards", {"items": [{"prompt_id": 7, "reply": "Rest."}]}, "items.0.prompt_id"),
    ]
    for path, body, why in refused:
        status, answer = asyncio.run(post(url, path, body, AUTH))
        assert status in (400, 413) and why in answer["detail"], (path, answer)
    said = [line for line in log_until_marker(url, lines, start, AUTH).splitlines() if "_failed " in line]
    assert len(said) == len(refused), said
    for line, (path, _, why) in zip(said, refused, strict=True):
        event = "openrlhf_failed" if path.startswith("/openrlhf") else "rewards_failed"
        assert f" {event} " in line and why in line, (line, why)


def test_trl_server_mode_raises_with_the_servers_explanation(
    server: tuple[str, list[str]], tmp_path: Path, data: Path
) -> None:
    url, _ = server
    reward = reward_function(server_url=url, token=TOKEN, split="train")
    assert len(TRAIN) > MOST
    step = TRAIN[: MOST + 1]
    with pytest.raises(
        DataError, match=r"HTTP 413\): a batch of 5 replies .* at most 4 \(healthbench serve --max-batch-size\)"
    ):
        asyncio.run(reward(prompts=["q"] * len(step), completions=["Rest."] * len(step), prompt_id=step))
    # A grader that answers HTTP 500 to everything: the server stops it and says why; so does TRL.
    with FakeOpenAI(fault_rate=1.0, faults=("500",)) as failing:
        assert failing.base_url
        env = {"HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_SERVER_TOKEN": TOKEN}
        with served_with_log(data, failing.base_url, env=env) as (failing_url, _):
            reward = reward_function(server_url=failing_url, token=TOKEN, split="train")
            with pytest.raises(RequestFailed, match=r"HTTP 502\): the grader cannot grade: .*500") as caught:
                asyncio.run(reward(prompts=["q"], completions=["Rest."], prompt_id=[TRAIN[0]]))
    assert KEY not in str(caught.value)


# --- item 3: nothing paid twice, nothing paid for nobody ----------------------------------------------------------


def test_a_sample_sent_again_reuses_what_was_paid_for_it(
    server: tuple[str, list[str]], module_fake: FakeOpenAI, tmp_path: Path, data: Path
) -> None:
    url, lines = server
    reply = "Ice it, rest it, and see a doctor if it swells."
    body = {"query": [PROMPT + reply + "<|im_end|>"], "prompts": [PROMPT], "labels": [TRAIN[0]]}
    module_fake.reset()
    start = len(lines)
    status, first = asyncio.run(post(url, "/openrlhf", body, AUTH))
    assert status == 200 and module_fake.requests_total == ITEMS
    # OpenRLHF's resend of the same sample (no id says it is): the same reward, no grader call.
    status, again = asyncio.run(post(url, "/openrlhf", body, AUTH))
    assert status == 200 and again == first and module_fake.requests_total == ITEMS
    # Twice in one step, and two requests at once for a new reply: graded once each.
    twice = {"split": "train", "items": [{"prompt_id": TRAIN[1], "reply": reply}] * 2}
    status, answer = asyncio.run(post(url, "/rewards", twice, AUTH))
    assert status == 200 and answer["results"][0] == answer["results"][1]
    assert module_fake.requests_total == 2 * ITEMS
    other = dict(body, query=[PROMPT + "Rest.<|im_end|>"])

    async def together() -> list[tuple[int, Any]]:
        return list(await asyncio.gather(post(url, "/openrlhf", other, AUTH), post(url, "/openrlhf", other, AUTH)))

    (status_a, a), (status_b, b) = asyncio.run(together())
    assert status_a == status_b == 200 and a == b and module_fake.requests_total == 3 * ITEMS
    assert module_fake.base_url
    assert first["rewards"][0] == pytest.approx(
        graded_by_cli(tmp_path, data, {TRAIN[0]: reply}, module_fake.base_url)[TRAIN[0]]["score"], abs=1e-9
    )
    graded = [line for line in log_until_marker(url, lines, start, AUTH).splitlines() if " rewards_graded " in line]
    assert "grader_calls=6" in graded[0] and "reused_calls=0" in graded[0]
    assert "grader_calls=0" in graded[1] and "reused_calls=6" in graded[1]
    assert "grader_calls=6" in graded[2] and "reused_calls=6" in graded[2]


@pytest.fixture
def paused() -> Iterator[FakeOpenAI]:
    """A fake grader whose answers are held until the test lets them go."""
    with FakeOpenAI() as fake:
        fake.pause()
        try:
            yield fake
        finally:
            fake.resume()


def test_a_request_whose_client_has_gone_stops_its_grading(data: Path, paused: FakeOpenAI) -> None:
    # Two grader calls in flight at most: a reply's six items go two by two, in arrival order.
    assert paused.base_url
    env = {"HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_SERVER_TOKEN": TOKEN}
    with served_with_log(data, paused.base_url, "--concurrency", "2", env=env) as (url, lines):
        body = {"split": "test", "items": [{"prompt_id": IDS[0], "reply": "Walk it off."}]}

        async def given_up() -> None:
            # A client that stops waiting once the grading has begun (curl -m, OpenRLHF's timeout).
            request = asyncio.ensure_future(post(url, "/rewards", body, AUTH))
            await reached(lambda: paused.requests_total == 2, "two grader calls in flight")
            request.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await request

        asyncio.run(given_up())
        until(lambda: any("rewards_abandoned" in line for line in lines), "the server's line for the request abandoned")
        paused.resume()
        # The next step's six items wait behind any of the abandoned reply's four: none was left to send.
        status, answer = asyncio.run(
            post(url, "/rewards", {"split": "test", "items": [{"prompt_id": IDS[1], "reply": "Ice."}]}, AUTH)
        )
        assert status == 200 and answer["results"][0]["reward"] is not None
        assert paused.requests_total == 2 + ITEMS
    said = "".join(strip_colour(line) for line in lines)
    assert "the client went away before its answer" in said


def test_in_process_a_cancelled_step_keeps_what_was_answered_for_the_same_reply_again(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three in service at once, the rest queued: answer the three, then cancel the step.
    with FakeOpenAI(max_running=3) as fake:
        assert fake.base_url
        monkeypatch.setenv("HEALTHBENCH_GRADER_BASE_URL", fake.base_url)
        monkeypatch.setenv("HEALTHBENCH_GRADER_API_KEY", KEY)
        fake.pause()
        rewards = BatchRewards(data)

        async def step_cancelled_then_sent_again() -> list[Any]:
            step = asyncio.create_task(rewards.grade([(IDS[2], "Stretch first.")]))

            def held() -> bool:
                return fake.capacity.running == 3 and fake.capacity.waiting == ITEMS - 3

            await reached(held, "three calls in service, the rest queued")
            fake.answer_held()
            await reached(lambda: len(rewards.reuse.verdicts) == 3, "the three answers kept")
            step.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await step
            fake.resume()
            sent = fake.requests_total
            again = await rewards.grade([(IDS[2], "Stretch first.")])
            return [sent, again]

        sent, again = asyncio.run(step_cancelled_then_sent_again())
        assert sent == ITEMS  # the three answered, and the three that were queued or held when it was cancelled
        assert fake.requests_total - sent == ITEMS - 3  # only what had not been answered is asked again
        assert again[0].reward is not None and (again[0].paid_calls, again[0].reused_calls) == (3, 3)


def test_sessions_and_the_grading_commands_never_reuse_a_verdict(module_fake: FakeOpenAI) -> None:
    row = Row.model_validate(ROWS[0])
    assert module_fake.base_url
    deployment = Deployment({"test": [row]}, GraderConfig(base_url=module_fake.base_url))

    async def twice() -> None:
        for _ in range(2):
            await deployment.grade("test", row, "Rest.", KEY)

    module_fake.reset()
    asyncio.run(twice())
    assert module_fake.requests_total == 2 * ITEMS  # each session's reply graded on its own, as the reference does
