"""A grader that answers but never usably, and one that answers nothing but 429: each stops the run within seconds
(a bounded, said time for the 429s) with one error naming the cause and the cure, where every call used to spend its
whole table of attempts (some 55 s a step for prose, 247 s for 429s). An occasional unusable answer is asked again
as ever, and an answer the output cap ends keeps its cure."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthbench.api import retrying
from healthbench.api.retrying import FIRST_ANSWERS
from healthbench.cli import main
from healthbench.testing import Canned, FakeOpenAI
from tests.reference import KEY
from tests.test_judge_pool import ENV, ITEMS, files, grade_args, pool_rows

CALLS = 40 * len(ITEMS)


@pytest.mark.parametrize("fault", ["prose", "null", "string_verdict"])
def test_a_grader_whose_answers_are_never_verdicts_stops_the_run_naming_the_cure(tmp_path: Path, fault: str) -> None:
    data, answers, _ = files(tmp_path, pool_rows(40))
    with FakeOpenAI(fault_rate=1.0, faults=[fault]) as fake:
        assert fake.base_url
        result = CliRunner().invoke(main, grade_args(data, answers, tmp_path / "out", [fake.base_url]), env=ENV)
        asked = fake.requests_total
    output = " ".join(result.output.split())
    assert result.exit_code == 1
    assert f"answers, but {round(0.75 * FIRST_ANSWERS)} of its first" in output
    assert "--reasoning-parser" in output and "--grader-max-output-tokens" in output and "chat template" in output
    assert "no score is written" in output and "once the endpoint answers" not in output
    # Stopped by its first answers: not the 12 attempts of each of the run's 240 calls.
    assert asked < CALLS
    assert "Traceback" not in result.output and KEY not in result.output


def test_an_occasional_unusable_answer_is_asked_again_and_the_run_completes(tmp_path: Path) -> None:
    data, answers, _ = files(tmp_path, pool_rows(40))
    with FakeOpenAI(fault_rate=0.3, faults=["prose"], seed=3) as fake:
        assert fake.base_url
        result = CliRunner().invoke(main, grade_args(data, answers, tmp_path / "out", [fake.base_url]), env=ENV)
    assert result.exit_code == 0, result.output


def test_a_grader_answering_only_429_stops_after_a_said_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The time is the setting's, shortened here so the test waits seconds, not a minute: the rule is the same.
    monkeypatch.setattr(retrying, "FIRST_LIMITS", 2.0)
    data, answers, _ = files(tmp_path, pool_rows(3))
    limited = Canned(429, '{"error": {"message": "Too many requests", "type": "rate_limit_error"}}')
    with FakeOpenAI(canned=limited) as fake:
        assert fake.base_url
        result = CliRunner().invoke(main, grade_args(data, answers, tmp_path / "out", [fake.base_url]), env=ENV)
    output = " ".join(result.output.split())
    assert result.exit_code == 1
    said = re.search(r"answered nothing but 429 \(rate limited\) for (\d+) s", output)
    assert said and "check the key's limits" in output
    assert int(said.group(1)) >= 2  # it waited its said time first: a limit that lifts within it is waited for
    assert "Traceback" not in result.output


def test_a_pool_whose_every_server_answers_unusably_stops_naming_each(tmp_path: Path) -> None:
    data, answers, _ = files(tmp_path, pool_rows(40))
    with FakeOpenAI(fault_rate=1.0, faults=["prose"]) as one, FakeOpenAI(fault_rate=1.0, faults=["prose"]) as two:
        assert one.base_url and two.base_url
        urls = [one.base_url, two.base_url]
        result = CliRunner().invoke(main, grade_args(data, answers, tmp_path / "out", urls), env=ENV)
        asked = one.requests_total + two.requests_total
    output = " ".join(result.output.split())
    assert result.exit_code == 1 and "every server of the pool is out" in output
    for url in urls:
        assert f"{url}: 12 of its first 12 answers could not be used" in output
    assert "no score is written" in output and asked < CALLS
