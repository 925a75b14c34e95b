"""`--grader-calls per-reply`: one grader request per reply, a verdict per item from its list, malformed lists
asked again and then failed, never scored; the default stays the reference's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from healthbench.errors import InvalidResponse
from healthbench.grading.per_reply import PER_REPLY_TEMPLATE_SHA256, parse_verdicts, per_reply_prompt
from healthbench.grading.verdict import NO_EXPLANATION
from healthbench.testing import FakeOpenAI
from healthbench.testing.replies import LIST_FAULTS, item_verdict, per_reply_items
from tests.conftest import make_row, write_jsonl
from tests.reference import check_against_reference, made_up_rows
from tests.test_grade_cli import grade_replies

PER_REPLY = ("--grader-calls", "per-reply")


def results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().split("\n")[:-1]]


def test_a_list_is_read_by_id() -> None:
    text = '```json\n[{"id": 2, "explanation": "b", "criteria_met": false}, {"id": "1", "criteria_met": true}]\n```'
    first, second = parse_verdicts(text, 2)
    assert (first.criteria_met, first.explanation) == (True, NO_EXPLANATION)
    assert (second.criteria_met, second.explanation) == (False, "b")


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ('[{"id": 1, "criteria_met": true}]', "no verdict for id 2"),
        ('[{"id": 1, "criteria_met": true}, {"id": 1, "criteria_met": true}, {"id": 2, "criteria_met": 1}]', "twice"),
        ('[{"id": 1, "criteria_met": true}, {"id": 3, "criteria_met": true}]', "not one of 1 to 2"),
        ('[{"id": 1.0, "criteria_met": true}, {"id": 2, "criteria_met": true}]', "not one of 1 to 2"),
        ('[{"id": true, "criteria_met": true}, {"id": 2, "criteria_met": true}]', "not one of 1 to 2"),
        ('[{"id": 1, "criteria_met": "true"}, {"id": 2, "criteria_met": true}]', "not a JSON boolean"),
        ('{"id": 1, "criteria_met": true}', "not a JSON list"),
        ("[1, 2]", "not a JSON object"),
        ("The reply meets both.", "not JSON"),
    ],
)
def test_a_list_that_misses_repeats_or_invents_an_id_is_no_answer(text: str, cause: str) -> None:
    with pytest.raises(InvalidResponse, match=cause):
        parse_verdicts(text, 2)


def test_the_fake_reads_the_prompt_it_is_sent() -> None:
    conversation = "user: hi\n\n## Item 7\n\n# Rubric items\n\nassistant: a reply"  # headings inside are passed
    parsed = per_reply_items(per_reply_prompt(conversation, ["[5] First", "[-3] Second\nof two lines"]))
    assert parsed == (conversation, [(1, "[5] First"), (2, "[-3] Second\nof two lines")])


def test_one_call_per_reply_and_a_verdict_per_item(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()
    replies = {r["prompt_id"]: f"Reply to {r['prompt_id']}: stay hydrated." for r in rows}
    assert fake.base_url
    result = grade_replies(tmp_path, rows, replies, "out", fake.base_url, *PER_REPLY)
    assert result.exit_code == 0, result.output
    assert len(fake.bodies) == len(rows)  # one request per reply
    for body in fake.bodies:
        parsed = per_reply_items(body["messages"][-1]["content"])
        assert parsed is not None and [n for n, _ in parsed[1]] == list(range(1, len(parsed[1]) + 1))
        assert body["max_tokens"] == max(2048, 256 * len(parsed[1]))
    # Every metric from the list's verdicts, as the reference computes metrics from verdicts.
    check_against_reference(tmp_path / "out", rows, replies, item_verdict)
    lines = results(tmp_path / "out")
    multi = next(r for r in lines if r["prompt_id"] == "multi")
    assert len(multi["rubric_items"]) == 4 and multi["usage"]["calls"] == 1
    assert all(item["explanation"] == "fake verdict" for item in multi["rubric_items"])
    grader = json.loads((tmp_path / "out" / "run.json").read_text())["spec"]["grader"]
    assert grader["calls"] == "per-reply" and grader["per_reply_template_sha256"] == PER_REPLY_TEMPLATE_SHA256
    assert grader["per_reply_item_tokens"] == 256
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert not any("per" in key or "calls" in key for key in metrics)  # the reference's keys only

    # Resumed, nothing is asked again; graded per item instead, the folder is another run's.
    again = grade_replies(tmp_path, rows, replies, "out", fake.base_url, *PER_REPLY)
    assert again.exit_code == 0 and len(fake.bodies) == len(rows)
    other = grade_replies(tmp_path, rows, replies, "out", fake.base_url)
    assert other.exit_code != 0 and "grader_calls" in other.output


@pytest.mark.parametrize("fault", LIST_FAULTS)
def test_a_malformed_list_is_asked_again(tmp_path: Path, fault: str) -> None:
    rows = [make_row("a"), make_row("b", prompt=(("user", "My knee hurts."),))]
    with FakeOpenAI(list_fault=lambda _body, seen: fault if seen < 2 else None) as server:
        assert server.base_url
        result = grade_replies(tmp_path, rows, {"a": "Rest.", "b": "Ice."}, "out", server.base_url, *PER_REPLY)
        assert result.exit_code == 0, result.output
        assert len(server.bodies) == 2 * 3  # each reply: two malformed lists, then a good one
    check_against_reference(tmp_path / "out", rows, {"a": "Rest.", "b": "Ice."}, item_verdict)


def test_a_list_never_right_fails_the_sample_and_nothing_is_made_up(tmp_path: Path) -> None:
    rows = [make_row("a"), make_row("b", prompt=(("user", "My knee hurts."),))]

    def fault(body: dict[str, Any], _seen: int) -> str | None:
        return "missing" if "My knee hurts." in body["messages"][-1]["content"] else None

    with FakeOpenAI(list_fault=fault) as server:
        assert server.base_url
        result = grade_replies(
            tmp_path, rows, {"a": "Rest.", "b": "Ice."}, "out", server.base_url, *PER_REPLY, "--max-attempts", "3"
        )
        assert len(server.bodies) == 1 + 3
    assert result.exit_code == 1
    assert "task b: its 2 rubric items, asked in one grader call (per-reply), could not be graded" in result.output
    assert "no verdict for id 2" in result.output
    assert [r["prompt_id"] for r in results(tmp_path / "out")] == ["a"]
    assert not (tmp_path / "out" / "metrics.json").exists()
    [failure] = [json.loads(line) for line in (tmp_path / "out" / "failures.jsonl").read_text().split("\n")[:-1]]
    assert failure["prompt_id"] == "b" and "no verdict for id 2" in failure["cause"]


def test_a_cap_given_is_every_request_s(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = [make_row("a", rubrics=[(i + 1, f"Criterion {i}", ("axis:accuracy",)) for i in range(12)])]
    assert fake.base_url
    assert grade_replies(tmp_path, rows, {"a": "Rest."}, "x", fake.base_url, *PER_REPLY).exit_code == 0
    assert (
        grade_replies(
            tmp_path, rows, {"a": "Rest."}, "y", fake.base_url, *PER_REPLY, "--grader-max-output-tokens", "500"
        ).exit_code
        == 0
    )
    assert [body["max_tokens"] for body in fake.bodies] == [12 * 256, 500]


def test_batch_per_reply_equals_live(tmp_path: Path) -> None:
    rows = made_up_rows()
    replies = {r["prompt_id"]: "Rest." for r in rows}
    with FakeOpenAI(batch_delay=0.05) as server:
        assert server.base_url
        assert grade_replies(tmp_path, rows, replies, "live", server.base_url, *PER_REPLY).exit_code == 0
        batch = grade_replies(
            tmp_path, rows, replies, "batch", server.base_url, *PER_REPLY, "--batch", "--poll-interval", "0.02"
        )
        assert batch.exit_code == 0, batch.output
        assert server.batch_lines_submitted == len(rows)
    assert (tmp_path / "live" / "metrics.json").read_bytes() == (tmp_path / "batch" / "metrics.json").read_bytes()


def test_the_dry_run_counts_a_call_per_reply_and_the_cache_it_assumes(tmp_path: Path) -> None:
    rows = [make_row(f"t{i}", prompt=(("user", f"Question {i}: my head hurts."),)) for i in range(4)]
    replies = {r["prompt_id"]: "Rest, fluids and a usual dose. " * 300 for r in rows}
    estimates = {}
    for name, extra in (("item", ()), ("reply", PER_REPLY), ("off", ("--no-prompt-cache-key",))):
        result = grade_replies(tmp_path, rows, replies, "x", "http://127.0.0.1:9/v1", "--dry-run", "--json", *extra)
        assert result.exit_code == 0, result.output
        estimates[name] = json.loads(result.output)["grader"]
    assert estimates["item"]["calls"] == 8 and estimates["reply"]["calls"] == 4
    # Per item, each reply's second item reads the start the two share (over 1,024 tokens): about half of all.
    assert 0.3 < estimates["item"]["prompt_cache"]["assumed_hit_rate"] < 0.5
    assert estimates["off"]["prompt_cache"]["assumed_hit_rate"] == 0 and estimates["off"]["cached_prompt_tokens"] == 0
    assert estimates["item"]["cost_usd"] < estimates["off"]["cost_usd"]
    text = grade_replies(tmp_path, rows, replies, "x", "http://127.0.0.1:9/v1", "--dry-run", *PER_REPLY).output
    assert "per-reply" in text and "not the official grading" in text and "prompt cache:" in text


def test_professional_per_reply_is_not_its_official_configuration() -> None:
    from healthbench.grading.settings import GradingOptions

    config = GradingOptions(grader_calls="per-reply").grader("professional")
    first, *_ = config.official_differences(None)
    assert str(first) == "grader calls per-reply (official: per-item)"


def test_served_grading_per_reply_and_keyed(fake: FakeOpenAI) -> None:
    """`serve`'s grading (its Deployment, without the SDK): one keyed request per reply of a group, per task."""
    import asyncio

    from healthbench.data.schema import Row
    from healthbench.grading.settings import GraderConfig
    from healthbench.integrations.openreward.deployment import Deployment

    row = Row.model_validate(make_row("a", rubrics=[(i + 1, f"Criterion {i}", ("axis:accuracy",)) for i in range(5)]))
    assert fake.base_url
    config = GraderConfig(base_url=fake.base_url, calls="per-reply")
    deployment = Deployment({"test": [row]}, config)

    async def twice() -> list[Any]:
        # A served grader sends a new host's first group at once: only its first request carries the key until the
        # host has answered it. The next group, on the same loop (as a server's), is all keyed.
        await deployment.grade_group("test", row, ["Rest.", "Sleep.", "Rest."], "sk-test")
        assert len(fake.bodies) == 3 and sum("prompt_cache_key" in body for body in fake.bodies) == 1
        fake.reset()
        return await deployment.grade_group("test", row, ["Rest.", "Sleep.", "Rest."], "sk-test")

    samples = asyncio.run(twice())
    assert len(fake.bodies) == 3 and len({body["prompt_cache_key"] for body in fake.bodies}) == 1  # one task
    conversation = "user: I have a headache, what should I do?\n\nassistant: Rest."
    assert [item.criteria_met for item in samples[0].items] == [
        item_verdict(conversation, f"[{i + 1}] Criterion {i}") for i in range(5)
    ]
    assert samples[0].reward == samples[2].reward
    metadata = deployment.metadata("test", samples[0])  # the reward's: it says how it was graded
    assert (
        metadata["grader_calls"] == "per-reply" and metadata["per_reply_template_sha256"] == PER_REPLY_TEMPLATE_SHA256
    )


def test_probe_per_reply_asks_once_per_reply_and_finds_the_tricks(tmp_path: Path) -> None:
    from healthbench.grading.transforms import TRANSFORMS
    from tests.test_probe import made_up_rows as probe_rows
    from tests.test_probe import probe

    rows = probe_rows(30)
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = [{"prompt_id": r["prompt_id"], "response": f"Rest and drink water ({r['prompt_id']})."} for r in rows]
    responses = write_jsonl(tmp_path / "replies.jsonl", replies)
    with FakeOpenAI(grader="fooled") as server:
        result = probe(data, responses, tmp_path / "out", server.base_url or "", *PER_REPLY)
        assert result.exit_code == 0, result.output
        assert server.requests_total == len(rows) * (1 + len(TRANSFORMS))  # one request per reply
    found = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert found["grader"]["calls"] == "per-reply"
    for name in ("grader_injection", "rubric_echo"):  # the fake judges each listed item as it judges it alone
        assert found["transforms"][name]["ci95"][0] > 0, (name, found["transforms"][name])
    assert "one per reply (per-reply)" in (tmp_path / "out" / "probe.html").read_text()
