"""Judge hosts as they are (issue 35): a grader that thinks before its verdict, a host that refuses a parameter this
project added, one whose answers carry no usage. Each is played by the fake endpoint over real HTTP
(`healthbench.testing.hosts`), and each must give the verdicts the plain fake gives, with at most a few extra
requests in all, or fail as what it is."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from healthbench.api.client import ApiClient, Retries
from healthbench.api.failures import refused_parameter
from healthbench.api.pacing.pacer import FIRST_WINDOW
from healthbench.api.wire import with_cache_key
from healthbench.data.schema import Row
from healthbench.errors import EndpointUnusable, InvalidResponse
from healthbench.grading.per_reply import parse_verdicts
from healthbench.grading.settings import GraderConfig
from healthbench.grading.verdict import parse_verdict
from healthbench.integrations.openreward.deployment import Deployment
from healthbench.integrations.openreward.environment import HealthBench
from healthbench.testing import FakeOpenAI, Host, verdict_reply
from tests.conftest import write_jsonl
from tests.reference import KEY
from tests.test_eval import run_eval
from tests.test_grade_cli import grade
from tests.test_metaeval import made_up_meta_rows, meta_eval
from tests.test_probe import made_up_rows, probe, summary

FAST = Retries(max_attempts=12, initial_backoff=0.001, max_backoff=0.01)


def reference_parse(text: str) -> dict[str, Any]:
    """The reference's `parse_json_to_dict` (simple-evals' healthbench_eval.py): {} for an answer it cannot read."""
    cleaned = re.sub(r"^```json\s*|\s*```$", "", text.strip())
    try:
        parsed = json.loads(cleaned)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


VERDICT = verdict_reply(True, "The reply advises rest.")
# What gpt-4.1 writes, and odd answers the reference still reads: each must be read exactly as it reads them.
GPT_41_ANSWERS = [
    VERDICT,
    verdict_reply(False, "No </think> here: the reply quotes a tag."),
    '{"explanation": "plain", "criteria_met": false}',
    '  ```json\n{"criteria_met": true}\n```  ',
    '```json\n{"explanation": "<think>quoted</think>", "criteria_met": true}\n```',
]


@pytest.mark.parametrize("answer", GPT_41_ANSWERS)
def test_answers_the_reference_reads_are_read_as_it_reads_them(answer: str) -> None:
    expected = reference_parse(answer)
    verdict = parse_verdict(answer)
    assert verdict.criteria_met is expected["criteria_met"]
    assert verdict.explanation == expected.get("explanation", "No explanation provided")


@pytest.mark.parametrize(
    "answer",
    [
        "<think>\nThe item asks for rest. The reply says rest.\n</think>\n\n" + VERDICT,
        "The item asks for rest; the template opened the block.\n</think>\n\n" + VERDICT,
        "<think>I could write </think> in my thinking too.</think>" + VERDICT,
        "<think>\nfine\n</think>" + VERDICT.replace("```json\n", "").replace("\n```", ""),
    ],
)
def test_thinking_before_the_verdict_is_set_aside(answer: str) -> None:
    assert reference_parse(answer) == {}  # the reference would ask again for ever
    verdict = parse_verdict(answer)
    assert verdict.criteria_met is True and verdict.explanation == "The reply advises rest."


def test_a_per_reply_list_after_thinking_is_read_and_unclosed_thinking_says_so() -> None:
    listed = '```json\n[{"id": 1, "criteria_met": true}, {"id": 2, "criteria_met": false}]\n```'
    verdicts = parse_verdicts("<think>two items</think>\n" + listed, 2)
    assert [v.criteria_met for v in verdicts] == [True, False]
    with pytest.raises(InvalidResponse, match="ends inside the grader's thinking"):
        parse_verdict("<think>\nStill weighing the rubric item against")
    with pytest.raises(InvalidResponse, match="not JSON"):
        parse_verdict("<think>done</think> I would say it is met.")


# How hosts refuse a parameter they do not take, from their answers as users reported them.
REFUSALS = {
    "azure": (
        400,
        {
            "error": {
                "message": "Unrecognized request argument supplied: prompt_cache_key",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        },
    ),
    "azure-old": (
        404,
        {
            "error": {
                "message": "Unrecognized request argument supplied: reasoning_effort",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        },
    ),
    "openai": (
        400,
        {
            "error": {
                "message": "Unknown parameter: 'prompt_cache_key'.",
                "type": "invalid_request_error",
                "param": "prompt_cache_key",
                "code": "unknown_parameter",
            }
        },
    ),
    "groq": (
        400,
        {
            "error": {
                "message": "property 'reasoning_effort' is unsupported, did you mean 'reasoning_format'?",
                "type": "invalid_request_error",
            }
        },
    ),
    "mistral": (
        422,
        {
            "object": "error",
            "message": {
                "detail": [
                    {
                        "type": "extra_forbidden",
                        "loc": ["body", "max_completion_tokens"],
                        "msg": "Extra inputs are not permitted",
                        "input": 32000,
                    }
                ]
            },
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        },
    ),
    "azure-ai": (
        400,
        {
            "requestid": "1b7c",
            "code": 400,
            "message": "Validation error at #/max_completion_tokens: Extra inputs are not permitted",
        },
    ),
    "tgi": (
        422,
        {
            "error": "Failed to deserialize the JSON body into the target type: unknown field "
            "`prompt_cache_key`, expected one of `messages`, `model` at line 1 column 9",
            "error_type": "validation",
        },
    ),
}
NAMED = {
    "azure": "prompt_cache_key",
    "azure-old": "reasoning_effort",
    "openai": "prompt_cache_key",
    "groq": "reasoning_effort",
    "mistral": "max_completion_tokens",
    "azure-ai": "max_completion_tokens",
    "tgi": "prompt_cache_key",
}


@pytest.mark.parametrize("host", list(REFUSALS))
def test_each_hosts_wording_of_a_refused_parameter_is_read(host: str) -> None:
    status, body = REFUSALS[host]
    assert refused_parameter(status, json.dumps(body).encode()) == NAMED[host]


def test_a_refused_value_a_rate_limit_or_a_prompt_names_no_refused_parameter() -> None:
    value = {
        "error": {
            "message": "Unsupported value: 'temperature' does not support 0.5 with this model.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    }
    assert refused_parameter(400, json.dumps(value).encode()) is None
    azure = json.dumps(REFUSALS["azure"][1]).encode()
    assert refused_parameter(429, azure) is None and refused_parameter(200, azure) is None
    flagged = {
        "error": {
            "message": "The response was filtered due to the prompt triggering Azure's content management policy.",
            "code": "content_filter",
            "param": "prompt",
        }
    }
    assert refused_parameter(400, json.dumps(flagged).encode()) is None


def grader_body(index: int, **extra: Any) -> dict[str, Any]:
    prompt = f"# Conversation\nuser: question {index}\n\n# Rubric item\n[5] Advises rest\n\n# Instructions\n"
    return {"model": "gpt-4.1-2025-04-14", "messages": [{"role": "user", "content": prompt}], **extra}


def verdicts(client: ApiClient, bodies: list[dict[str, Any]], cache_key: bool) -> list[Any]:
    async def work() -> list[Any]:
        try:
            calls = []
            for body in bodies:
                payload = json.dumps(body).encode()
                sent = with_cache_key(payload, "healthbench-k") if cache_key else payload
                calls.append(client.complete(sent, parse_verdict, parsed=body))
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await client.aclose()

    # The time on the wire is the machine's, not the host's answer: left out of what is compared.
    return [_untimed(outcome) for outcome in asyncio.run(work())]


def _untimed(outcome: Any) -> Any:
    if not isinstance(outcome, tuple):
        return outcome
    verdict, usage = outcome
    return verdict, dataclasses.replace(usage, wire_microseconds=0)


def test_a_refused_prompt_cache_key_costs_one_request_in_all_and_one_line(caplog: pytest.LogCaptureFixture) -> None:
    bodies = [grader_body(i, temperature=0.5, max_tokens=2048) for i in range(40)]
    with FakeOpenAI() as plain:
        expected = verdicts(ApiClient(plain.base_url or "", KEY, retry=FAST), bodies, True)
    with FakeOpenAI(judge_host=Host(refuses=("prompt_cache_key",))) as azure, caplog.at_level(logging.WARNING):
        found = verdicts(ApiClient(azure.base_url or "", KEY, retry=FAST, concurrency=64), bodies, True)
        assert found == expected
        assert azure.requests_total == len(bodies) + 1 and azure.responses_by_kind["refused_parameter"] == 1
        assert all("prompt_cache_key" not in body for body in azure.bodies[1:])
    lines = [record.getMessage() for record in caplog.records if record.name == "healthbench.api"]
    assert len(lines) == 1 and "refuses the parameter prompt_cache_key" in lines[0], lines
    assert "Unrecognized request argument supplied: prompt_cache_key" in lines[0]


def test_unpaced_requests_go_at_once_without_prompt_cache_key_while_the_first_is_out_and_cost_one_refusal() -> None:
    # A known limit lets the whole burst start at once: only the first request carries prompt_cache_key (which
    # decides no verdict) until the host has answered it, so a refusing host still costs one request in all.
    bodies = [grader_body(i, temperature=0.5, max_tokens=2048) for i in range(40)]
    with FakeOpenAI() as plain:
        expected = verdicts(ApiClient(plain.base_url or "", KEY, retry=FAST), bodies, True)
        plain.reset()
        found = verdicts(ApiClient(plain.base_url or "", KEY, retry=FAST, concurrency=64, rpm=1e6), bodies, True)
        assert found == expected
        assert sum("prompt_cache_key" in body for body in plain.bodies) == 1
    with FakeOpenAI(judge_host=Host(refuses=("prompt_cache_key",))) as azure:
        found = verdicts(ApiClient(azure.base_url or "", "sk-other", retry=FAST, concurrency=64, rpm=1e6), bodies, True)
        assert found == expected
        assert azure.requests_total == len(bodies) + 1 and azure.responses_by_kind["refused_parameter"] == 1


def test_a_reasoning_effort_waits_for_the_first_answer_even_when_unpaced() -> None:
    bodies = [grader_body(i, max_completion_tokens=4000, reasoning_effort="low") for i in range(10)]
    host = Host(refuses=("max_completion_tokens", "reasoning_effort"))
    with FakeOpenAI(judge_host=host, strict_params=False) as fake:
        found = verdicts(ApiClient(fake.base_url or "", "sk-third", retry=FAST, rpm=1e6), bodies, False)
        assert all(not isinstance(answer, BaseException) for answer in found), found
        assert fake.responses_by_kind["refused_parameter"] == 2 and fake.requests_total == len(bodies) + 2


def test_a_reasoning_models_added_parameters_are_renamed_or_dropped_once_each() -> None:
    bodies = [grader_body(i, max_completion_tokens=4000, reasoning_effort="low") for i in range(10)]
    host = Host(refuses=("max_completion_tokens", "reasoning_effort"))
    with FakeOpenAI(judge_host=host, strict_params=False) as fake:
        client = ApiClient(fake.base_url or "", KEY, retry=FAST)
        found = verdicts(client, bodies, False)
        assert all(not isinstance(answer, BaseException) for answer in found), found
        assert fake.responses_by_kind["refused_parameter"] == 2 and fake.requests_total == len(bodies) + 2
        assert all(body.get("max_tokens") == 4000 and "reasoning_effort" not in body for body in fake.bodies[2:])
        assert client.server.hosts.changes == {"max_completion_tokens": "max_tokens", "reasoning_effort": None}


def test_a_host_that_refuses_a_parameter_the_reference_sends_stops_the_run_naming_it() -> None:
    bodies = [grader_body(i, temperature=0.5, max_tokens=2048) for i in range(3 * FIRST_WINDOW)]
    with FakeOpenAI(judge_host=Host(refuses=("temperature",))) as fake:
        found = verdicts(ApiClient(fake.base_url or "", KEY, retry=FAST), bodies, True)
        assert all(isinstance(answer, EndpointUnusable) for answer in found), found
        message = str(found[0])
        assert "does not take temperature, which the reference's request carries" in message
        assert "Unrecognized request argument supplied: temperature" in message
        # Nothing is left out, and the run stops within the first requests (the slow start's first window, out
        # before any answer), not one refusal per call.
        assert fake.requests_total <= FIRST_WINDOW + 2 < len(bodies)
        assert all(body["temperature"] == 0.5 for body in fake.bodies)


# Each command against each host, beside the plain fake: the same metrics, a few extra requests in all.
HOSTS = {
    "azure": Host(refuses=("prompt_cache_key",)),
    "think": Host(think="block"),
    "closing": Host(think="closing"),
    "reasoning_content": Host(think="reasoning_content"),
    "reasoning": Host(think="reasoning"),
    "no_usage": Host(usage=False),
    "all_at_once": Host(think="block", refuses=("prompt_cache_key",), usage=False),
}


def metrics_of(out: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((out / "metrics.json").read_text())
    return loaded


def against(host: Host | None, command: Callable[[str], Result]) -> tuple[Result, FakeOpenAI]:
    """`command` run against a fake playing `host` (None: the plain fake), and the fake, stopped."""
    with FakeOpenAI(judge_host=host) as fake:
        result = command(fake.base_url or "")
    return result, fake


def adapted_lines(result: Result) -> list[str]:
    return [line for line in result.output.splitlines() if "refuses the parameter" in line]


def check_same(plain: tuple[Result, FakeOpenAI], hosted: tuple[Result, FakeOpenAI], host: Host) -> None:
    """`hosted` finished as `plain` did: exit 0, at most one extra request, one line for a refused parameter."""
    (first, fake), (second, other) = plain, hosted
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    assert other.requests_total - fake.requests_total == len(host.refuses)
    assert len(adapted_lines(second)) == len(host.refuses), second.output
    if not host.usage:
        assert "cost unknown" in second.output and "$0.00" not in second.output, second.output


@pytest.mark.parametrize("name", list(HOSTS))
def test_grade_gives_the_plain_fakes_metrics_against_each_host(tmp_path: Path, name: str) -> None:
    host = HOSTS[name]
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = [{"prompt_id": r["prompt_id"], "response": f"Rest, {r['prompt_id']}."} for r in rows]
    responses = write_jsonl(tmp_path / "replies.jsonl", replies)
    plain = against(None, lambda url: grade(tmp_path, data, responses, "plain", url))
    hosted = against(host, lambda url: grade(tmp_path, data, responses, "hosted", url))
    check_same(plain, hosted, host)
    assert metrics_of(tmp_path / "hosted") == metrics_of(tmp_path / "plain")
    usage = json.loads((tmp_path / "hosted" / "usage.json").read_text())["whole_run"]
    assert (usage["cost_usd"] is None) is (not host.usage)  # unknown, never $0
    if host.think is not None and host.usage:  # the thinking is paid for, and counted
        plain_usage = json.loads((tmp_path / "plain" / "usage.json").read_text())["whole_run"]
        assert usage["grader"]["completion_tokens"] > plain_usage["grader"]["completion_tokens"]


def test_eval_probe_and_meta_eval_give_the_plain_fakes_figures_against_a_host_of_every_quirk(tmp_path: Path) -> None:
    host = HOSTS["all_at_once"]
    data = write_jsonl(tmp_path / "rows.jsonl", made_up_rows())
    for command in ("eval", "probe"):

        def run(url: str, out: str, command: str = command) -> Result:
            if command == "eval":
                return run_eval(data, tmp_path / out, url)
            return probe(data, None, tmp_path / out, url, "--model", "fake-model", "--base-url", url)

        plain = against(None, functools.partial(run, out=f"{command}-plain"))
        hosted = against(host, functools.partial(run, out=f"{command}-hosted"))
        check_same(plain, hosted, host)
        if command == "eval":
            assert metrics_of(tmp_path / "eval-hosted") == metrics_of(tmp_path / "eval-plain")
        else:
            hosted_summary, plain_summary = summary(tmp_path / "probe-hosted"), summary(tmp_path / "probe-plain")
            assert hosted_summary["transforms"] == plain_summary["transforms"]
            assert hosted_summary["base_mean_score"] == plain_summary["base_mean_score"]
    meta = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(60))
    plain = against(None, lambda url: meta_eval(meta, tmp_path / "meta-plain", url))
    hosted = against(host, lambda url: meta_eval(meta, tmp_path / "meta-hosted", url))
    check_same(plain, hosted, host)
    assert metrics_of(tmp_path / "meta-hosted") == metrics_of(tmp_path / "meta-plain")


def test_a_served_sessions_reward_is_the_plain_fakes_against_a_host_of_every_quirk() -> None:
    rows = [Row.model_validate(row) for row in made_up_rows()[:4]]

    def rewards(host: Host | None) -> tuple[list[float], int]:
        with FakeOpenAI(judge_host=host) as fake:
            config = GraderConfig(base_url=fake.base_url or "", max_attempts=2)
            env_cls = HealthBench.bound(Deployment({"test": rows}, config))

            async def sessions() -> list[float]:  # one after another, in one loop, as a server runs them
                found = []
                for row in rows:
                    env = env_cls({"split": "test", "prompt_id": row.prompt_id}, {"OPENAI_API_KEY": KEY})
                    result = await env.call_terminal_tool(f"Rest, {row.prompt_id}.")
                    found.append(result.root.output.reward)
                return found

            found = asyncio.run(sessions())
        return found, fake.requests_total

    plain, made = rewards(None)
    hosted, made_hosted = rewards(HOSTS["all_at_once"])
    assert hosted == plain and made_hosted == made + 1


def test_a_thinking_grader_whose_cap_runs_out_stops_the_run_as_that_asked_at_most_twice(tmp_path: Path) -> None:
    rows = made_up_rows()
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    responses = write_jsonl(
        tmp_path / "replies.jsonl", [{"prompt_id": r["prompt_id"], "response": "Rest."} for r in rows]
    )
    calls = sum(len(row["rubrics"]) for row in rows)
    for think in ("block", "reasoning_content"):
        host = Host(think=think, thinking_tokens=5000)
        result, fake = against(host, functools.partial(grade, tmp_path, data, responses, think))
        assert result.exit_code == 1
        output = " ".join(result.output.split())
        assert "--grader-max-output-tokens" in output and "2,048 tokens now" in output
        assert "not JSON" not in output and "could not be used (the last: the output cap ran out" in output
        assert "run the same command again" not in output and "once the endpoint answers" not in output
        assert "asking again does not cure" in output
        assert fake.requests_total <= 2 * calls


def test_batch_lines_refused_for_an_added_parameter_go_again_without_it_once(tmp_path: Path) -> None:
    rows = made_up_rows(10)
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    responses = write_jsonl(
        tmp_path / "replies.jsonl", [{"prompt_id": r["prompt_id"], "response": "Rest."} for r in rows]
    )
    batched = ("--batch", "--poll-interval", "0.05")
    plain = against(None, lambda url: grade(tmp_path, data, responses, "plain", url, *batched))
    host = Host(refuses=("prompt_cache_key",))
    result, fake = against(host, lambda url: grade(tmp_path, data, responses, "hosted", url, *batched))
    assert plain[0].exit_code == 0 and result.exit_code == 0, result.output
    assert metrics_of(tmp_path / "hosted") == metrics_of(tmp_path / "plain")
    assert len(adapted_lines(result)) == 1, result.output
    assert fake.batches_created == plain[1].batches_created + 1  # one follow-up batch, without the key
    assert all(
        "prompt_cache_key" not in json.loads(text) for text in fake.batch_bodies[-plain[1].batch_lines_submitted :]
    )
