"""`serve`'s batch routes through real HTTP against a served process with a token and the server's own grader key:
`POST /rewards` and `POST /openrlhf` give `healthbench grade`'s rewards for the same replies; a reply that cannot be
graded is never a reward (null with its error on `/rewards`, a failed request naming the sample and task on
`/openrlhf`); an unknown prompt_id or split is a 400 naming it; the token is needed, and HTTP Basic auth with the
token as password (what a URL's userinfo becomes, and all OpenRLHF's client can send) is let in; the end-of-turn and
padding tokens a decoded rollout ends with are not part of the reply graded; a batch above the bound costs nothing.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytest.importorskip("openreward")

from starlette.datastructures import Headers

from healthbench.data.schema import Row
from healthbench.data.splits import split_rows
from healthbench.integrations.openreward.batchroutes import strip_end_tokens
from healthbench.integrations.openreward.guard import presented_token
from healthbench.testing import FakeOpenAI
from tests.conftest import Serving
from tests.reference import KEY, made_up_rows
from tests.serving import UNGRADABLE, graded_by_cli, log_until_marker

ROWS = made_up_rows()[:6]
IDS = [row["prompt_id"] for row in ROWS]
# The tasks of the train split `serve` serves beside `test`, where `/openrlhf` looks labels up by default.
TRAIN = [row.prompt_id for row in split_rows([Row.model_validate(row) for row in ROWS], "train")]
TOKEN = "token-r-5f0c1e9d8b7a6f5e4d3c2b1a"
MOST = 8  # the server's --max-batch-size here
PROMPT = "<|im_start|>user\nMy child has a fever.<|im_end|>\n<|im_start|>assistant\n"
SERVING = Serving(
    token_file=TOKEN + "\n",
    flags=("--max-batch-size", str(MOST)),
    env={"HEALTHBENCH_GRADER_API_KEY": KEY},
    not_in_output=(TOKEN,),
)


async def post(url: str, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.post(url + path, json=body, headers=headers) as response:
        text = await response.text()
        return response.status, json.loads(text)


def with_userinfo(url: str, user: str, password: str) -> str:
    """`url` with `user:password@` before its host, as OpenRLHF's --reward.remote_url carries a token."""
    scheme, rest = url.split("://")
    return f"{scheme}://{user}:{password}@{rest}"


def openrlhf_body(replies: dict[str, str], end: str = "<|im_end|>") -> dict[str, list[str]]:
    """A request as OpenRLHF's client sends it: the decoded prompt-and-reply, the prompt, the label."""
    return {
        "query": [PROMPT + reply + end for reply in replies.values()],
        "prompts": [PROMPT] * len(replies),
        "labels": list(replies),
    }


def test_rewards_are_grades_and_an_ungradable_reply_has_none(
    server: tuple[str, list[str]], module_fake: FakeOpenAI, data: Path, tmp_path: Path
) -> None:
    url, lines = server
    replies = {pid: f"Rest and fluids ({pid}); see a doctor if it gets worse." for pid in IDS}
    bad = f"{UNGRADABLE}: this reply gets no verdict"
    items = [{"prompt_id": pid, "reply": reply} for pid, reply in replies.items()]
    items.insert(2, {"prompt_id": IDS[1], "reply": bad})
    start = len(lines)
    status, answer = asyncio.run(post(url, "/rewards", {"split": "test", "items": items}, {"X-API-Key": TOKEN}))
    assert status == 200, answer
    assert module_fake.base_url
    graded = graded_by_cli(tmp_path, data, replies, module_fake.base_url)
    results = answer["results"]
    assert [result["prompt_id"] for result in results] == [item["prompt_id"] for item in items]
    failed = results.pop(2)
    assert failed["reward"] is None and failed["axes"] == {}
    assert f"task {IDS[1]}" in failed["error"] and "rubric item" in failed["error"], failed
    for result in results:
        record = graded[result["prompt_id"]]
        assert result["error"] is None
        assert result["reward"] == pytest.approx(record["score"], abs=1e-9)
        assert result["axes"] == pytest.approx(
            {tag: value for tag, value in record["metrics"].items() if tag.startswith("axis:")}, abs=1e-9
        )
        assert result["axes"]
    log = log_until_marker(url, lines, start, {"X-API-Key": TOKEN})
    assert " rewards_graded " in log and "items=7" in log and "failed=1" in log


def test_openrlhf_with_the_token_in_the_url_gets_grades_rewards(
    server: tuple[str, list[str]], module_fake: FakeOpenAI, data: Path, tmp_path: Path
) -> None:
    url, _ = server
    replies = {pid: f"Call your doctor about {pid}.\n" for pid in TRAIN[:3]}
    body = openrlhf_body(replies, end="<|im_end|><|endoftext|><|endoftext|>")
    status, answer = asyncio.run(post(with_userinfo(url, "anyone", TOKEN), "/openrlhf", body))
    assert status == 200, answer
    assert module_fake.base_url
    graded = graded_by_cli(tmp_path, data, replies, module_fake.base_url)
    expected = [graded[pid]["score"] for pid in replies]
    assert answer["rewards"] == pytest.approx(expected, abs=1e-9)
    assert answer["scores"] == answer["rewards"]
    logs = answer["extra_logs"]
    axes = sorted({tag for row in ROWS for item in row["rubrics"] for tag in item["tags"] if tag.startswith("axis:")})
    assert sorted(logs) == sorted([*axes, *(f"{tag}:graded" for tag in axes)])
    for index, pid in enumerate(replies):
        metrics = graded[pid]["metrics"]
        for tag in axes:
            assert logs[f"{tag}:graded"][index] == float(tag in metrics)
            assert logs[tag][index] == pytest.approx(metrics.get(tag, 0.0), abs=1e-9)
    # The split named in the query string: the same rewards.
    status, again = asyncio.run(post(with_userinfo(url, "", TOKEN), "/openrlhf?split=test", body))
    assert status == 200 and again["rewards"] == pytest.approx(expected, abs=1e-9), again


def test_the_token_is_needed_and_basic_auth_carries_it(server: tuple[str, list[str]], module_fake: FakeOpenAI) -> None:
    url, _ = server
    body = openrlhf_body({IDS[0]: "Rest."})
    items = {"items": [{"prompt_id": IDS[0], "reply": "Rest."}]}
    module_fake.reset()
    wrong = base64.b64encode(b"user:token-x-ffffffffffffffffffffffff").decode()
    for headers in ({}, {"Authorization": f"Basic {wrong}"}, {"Authorization": "Basic !!!"}):
        for path, payload in (("/openrlhf", body), ("/rewards", items)):
            status, answer = asyncio.run(post(url, path, payload, headers))
            assert status == 401 and "http://user:<token>@" in answer["detail"], (path, headers, answer)
    status, answer = asyncio.run(post(with_userinfo(url, "user", "not-the-token-000000"), "/openrlhf", body))
    assert status == 401, answer
    assert module_fake.requests_total == 0
    basic = base64.b64encode(f"trainer:{TOKEN}".encode()).decode()
    assert asyncio.run(post(url, "/rewards", items, {"Authorization": f"Basic {basic}"}))[0] == 200
    assert asyncio.run(post(url, "/rewards", items, {"Authorization": f"Bearer {TOKEN}"}))[0] == 200


def test_unknown_prompt_ids_and_splits_are_refused_naming_them(
    server: tuple[str, list[str]], module_fake: FakeOpenAI
) -> None:
    url, _ = server
    auth = {"X-API-Key": TOKEN}
    module_fake.reset()
    items = [{"prompt_id": IDS[0], "reply": "Rest."}, {"prompt_id": "no-such-task", "reply": "Rest."}]
    status, answer = asyncio.run(post(url, "/rewards", {"split": "test", "items": items}, auth))
    assert status == 400 and "'no-such-task'" in answer["detail"] and "'test'" in answer["detail"], answer
    # OpenRLHF's labels are looked up in the train split by default.
    body = openrlhf_body({TRAIN[0]: "Rest.", "no-such-task": "Rest."})
    status, answer = asyncio.run(post(url, "/openrlhf", body, auth))
    assert status == 400 and "'no-such-task'" in answer["detail"] and "'train'" in answer["detail"], answer
    for path, payload in (("/rewards", {"split": "dev", "items": items[:1]}), ("/openrlhf?split=dev", body)):
        status, answer = asyncio.run(post(url, path, payload, auth))
        assert status == 400 and "'dev'" in answer["detail"] and "'test'" in answer["detail"], answer
    assert module_fake.requests_total == 0


def test_openrlhf_never_rewards_an_ungradable_or_unreadable_sample(
    server: tuple[str, list[str]], module_fake: FakeOpenAI
) -> None:
    url, lines = server
    auth = {"X-API-Key": TOKEN}
    body = openrlhf_body({IDS[0]: "Rest.", IDS[3]: f"{UNGRADABLE} reply"})
    start = len(lines)
    status, answer = asyncio.run(post(url, "/openrlhf", body, auth))
    assert status == 502 and "rewards" not in answer, answer
    assert answer["detail"].startswith(f"sample 1: task {IDS[3]}") and "rubric item" in answer["detail"], answer
    log = log_until_marker(url, lines, start, auth)
    assert " openrlhf_failed " in log and "sample=1" in log
    # A query that does not start with its prompt (a prompt cut to fit, say): no reply to grade.
    module_fake.reset()
    body = openrlhf_body({IDS[0]: "Rest.", IDS[1]: "Rest."})
    body["query"][1] = body["query"][1][5:]
    status, answer = asyncio.run(post(url, "/openrlhf", body, auth))
    assert status == 400 and answer["detail"].startswith(f"sample 1 (task {IDS[1]})"), answer
    body["labels"].pop()
    status, answer = asyncio.run(post(url, "/openrlhf", body, auth))
    assert status == 400 and "differ in length" in answer["detail"], answer
    assert module_fake.requests_total == 0


def test_a_batch_above_the_bound_costs_no_grader_call(server: tuple[str, list[str]], module_fake: FakeOpenAI) -> None:
    url, _ = server
    auth = {"X-API-Key": TOKEN}
    module_fake.reset()
    items = [{"prompt_id": IDS[i % len(IDS)], "reply": "Rest."} for i in range(MOST + 1)]
    status, answer = asyncio.run(post(url, "/rewards", {"items": items}, auth))
    assert status == 413 and "--max-batch-size" in answer["detail"], answer
    body = openrlhf_body({IDS[0]: "Rest."})
    body = {key: values * (MOST + 1) for key, values in body.items()}
    status, answer = asyncio.run(post(url, "/openrlhf", body, auth))
    assert status == 413 and f"at most {MOST}" in answer["detail"], answer
    long_reply = {"items": [{"prompt_id": IDS[0], "reply": "x" * 50_001}]}
    status, answer = asyncio.run(post(url, "/rewards", long_reply, auth))
    assert status == 200 and "--max-reply-chars" in answer["results"][0]["error"], answer
    assert answer["results"][0]["reward"] is None
    assert module_fake.requests_total == 0


def test_end_of_turn_and_padding_tokens_are_not_part_of_the_reply() -> None:
    assert strip_end_tokens("Rest.<|im_end|>") == "Rest."
    assert strip_end_tokens("Rest.<|im_end|>\n<|endoftext|><|endoftext|>") == "Rest."
    assert strip_end_tokens("Rest.<|eot_id|>") == strip_end_tokens("Rest.</s>") == "Rest."
    assert strip_end_tokens("Rest. \n<|im_end|>") == "Rest. \n"  # the reply's own whitespace stays
    assert strip_end_tokens("Rest.\n") == "Rest.\n"
    assert strip_end_tokens("Say </s> here, then rest.") == "Say </s> here, then rest."


def test_the_token_is_read_from_each_header_the_door_takes() -> None:
    def token(*pairs: tuple[str, str]) -> str | None:
        # As ASGI gives them: names in lower case.
        return presented_token(Headers(raw=[(k.lower().encode(), v.encode()) for k, v in pairs]))

    basic = base64.b64encode(b"user:secret:with:colons").decode()
    assert token(("Authorization", f"Basic {basic}")) == "secret:with:colons"
    assert token(("authorization", f"basic {base64.b64encode(b':tok').decode()}")) == "tok"
    assert token(("Authorization", f"Basic {base64.b64encode(b'no-colon').decode()}")) is None
    assert token(("Authorization", "Basic %%%")) is None
    assert token(("X-API-Key", "a"), ("X-API-Key", "b"), ("Authorization", "Bearer c")) == "a"
    assert token(("Authorization", "Bearer  c ")) == "c"
    assert token(("Authorization", "c")) is None
