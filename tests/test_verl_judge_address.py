"""The verl reward file (`integrations.verl`) when verl serves the judge itself and passes its router's address
(`reward_router_address="HOST:PORT"`, with `reward_model_tokenizer`): the grader is `http://HOST:PORT/v1` with no
grader URL or key in the environment, its model the one that server lists at `/v1/models` (asked once per address
per process), unless `reward_kwargs` names a `grader_model`; a `grader_base_url` in `reward_kwargs` wins over the
router. Here the address is a fake judge's own (verl's real router in front of two of them, and verl's reward loop
calling the file: tests/test_verl_judge.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from healthbench.errors import EndpointUnusable, SettingsError
from healthbench.grading.grader import DEFAULT_GRADER_MODEL
from healthbench.integrations import verl as verl_rewards
from healthbench.testing import FakeOpenAI
from tests.conftest import write_jsonl
from tests.reference import KEY, made_up_rows
from tests.serving import graded_by_cli

ROWS = made_up_rows()[:4]
JUDGE = "/checkpoints/judge-32b"  # verl's vLLM and SGLang servers name the model by its local path
NOTHING = "127.0.0.1:9"  # an address nothing listens on

pytestmark = pytest.mark.usefixtures("no_grader")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "rows.jsonl", ROWS)


def address(server: FakeOpenAI) -> str:
    """The server's `HOST:PORT`, as verl passes its router's."""
    assert server.base_url
    return urlsplit(server.base_url).netloc


def info(data: Path) -> dict[str, Any]:
    """`export`'s extra_info for rows of `data` (no split)."""
    return {"split": None, "index": 0, "data": str(data), "heldout": None, "seed": 0}


def pairs() -> list[tuple[str, str]]:
    return [(row["prompt_id"], f"Reply to {row['prompt_id']}: rest and fluids.") for row in ROWS]


def as_grade_scores(tmp: Path, data: Path, model: str) -> list[float]:
    """`healthbench grade`'s score for each of `pairs()`, graded by `model` on a fake of its own."""
    with FakeOpenAI() as reference:
        assert reference.base_url
        found = graded_by_cli(tmp, data, dict(pairs()), reference.base_url, flags=("--grader-model", model))
    return [found[pid]["score"] for pid, _ in pairs()]


async def scored(data: Path, **kwargs: Any) -> list[float]:
    """`compute_score` on every one of `pairs()` at once, as verl's reward loop gathers a batch's calls."""
    calls = (verl_rewards.compute_score("healthbench", reply, pid, info(data), **kwargs) for pid, reply in pairs())
    return list(await asyncio.gather(*calls))


def test_the_router_address_grades_with_the_model_its_server_lists_asked_once(data: Path, tmp_path: Path) -> None:
    with FakeOpenAI(models=(JUDGE,)) as judge:
        given = {"reward_router_address": address(judge), "reward_model_tokenizer": object(), "grader_max_attempts": 2}
        scores = asyncio.run(scored(data, **given))
        assert judge.models_listed == 1  # a step's gathered calls wait for the one asking
        calls = judge.requests_total
        assert calls == sum(len(row["rubrics"]) for row in ROWS)
        assert {body["model"] for body in judge.bodies} == {JUDGE}
        assert set(judge.auth_headers) == {None}  # no key: none in the environment, none given
        # The batch form, on its own loop in this process: the model is known, so nothing is asked again.
        replies, truths = [reply for _, reply in pairs()], [pid for pid, _ in pairs()]
        batch = verl_rewards.compute_score_batch(
            ["healthbench"] * len(ROWS), replies, truths, [info(data)] * len(ROWS), **given
        )
        assert judge.models_listed == 1
        # The same replies again within the reuse window: their verdicts are reused, nothing is paid twice.
        assert judge.requests_total == calls
    expected = as_grade_scores(tmp_path, data, JUDGE)
    assert scores == pytest.approx(expected, abs=1e-9)
    assert batch == pytest.approx(expected, abs=1e-9)


def test_a_grader_model_given_is_not_asked_for_and_the_router_wins_over_the_environment(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trainer's environment naming another grader, and a key: the router's judge grades, with the key.
    monkeypatch.setenv("HEALTHBENCH_GRADER_BASE_URL", f"http://{NOTHING}/v1")
    monkeypatch.setenv("HEALTHBENCH_GRADER_API_KEY", KEY)
    with FakeOpenAI(models=()) as judge:  # it lists nothing: not asked
        scores = asyncio.run(scored(data, reward_router_address=address(judge), grader_model="my-judge"))
        assert judge.models_listed == 0
        assert {body["model"] for body in judge.bodies} == {"my-judge"}
        assert set(judge.auth_headers) == {f"Bearer {KEY}"}
    assert scores == pytest.approx(as_grade_scores(tmp_path, data, "my-judge"), abs=1e-9)


def test_a_grader_base_url_given_wins_over_the_router(data: Path, tmp_path: Path) -> None:
    with FakeOpenAI(models=()) as grader:
        assert grader.base_url
        scores = asyncio.run(scored(data, reward_router_address=NOTHING, grader_base_url=grader.base_url))
        assert grader.models_listed == 0
        assert {body["model"] for body in grader.bodies} == {DEFAULT_GRADER_MODEL}  # none listed
    assert scores == pytest.approx(as_grade_scores(tmp_path, data, DEFAULT_GRADER_MODEL), abs=1e-9)


@pytest.mark.parametrize(
    ("models", "said"), [((), "lists no model"), (("judge-a", "judge-b"), r"lists 2 models \(judge-a, judge-b\)")]
)
def test_a_judge_listing_no_model_or_several_is_an_error_naming_its_address(
    data: Path, models: tuple[str, ...], said: str
) -> None:
    with FakeOpenAI(models=models) as judge:
        where = address(judge)
        for _ in range(2):  # a failed asking is not kept: the next call asks again
            with pytest.raises(SettingsError, match=rf"reward_router_address {where} {said} at http://{where}/v1/.*"):
                asyncio.run(scored(data, reward_router_address=where))
            with pytest.raises(SettingsError, match=rf"{where} {said}.*reward_kwargs\.grader_model=NAME"):
                one = (["healthbench"], ["fine"], [ROWS[0]["prompt_id"]], [info(data)])
                verl_rewards.compute_score_batch(*one, reward_router_address=where)
        assert judge.models_listed == 4
        assert judge.requests_total == 0  # no grader call without a model


def test_a_router_nothing_answers_at_stops_naming_its_url(data: Path) -> None:
    with pytest.raises(EndpointUnusable, match=rf"^verl's judge endpoint http://{NOTHING}/v1 cannot be reached"):
        asyncio.run(scored(data, reward_router_address=NOTHING, grader_max_attempts=2))
