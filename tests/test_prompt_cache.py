"""Every grader request carries a prompt_cache_key (one per reply), the prompts stay the reference's, cached tokens
are counted and priced, and turning the key on or off asks nothing again."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from healthbench.api.client import ApiClient
from healthbench.api.pacing.pacer import FIRST_WINDOW
from healthbench.api.wire import request_key, with_cache_key
from healthbench.cli import main
from healthbench.data.schema import Row
from healthbench.grading.grader import Grader
from healthbench.grading.prompt import (
    TEMPLATE_SHA256,
    grader_prompt,
    prompt_cache_key,
    render_conversation,
    rubric_item_text,
    transcript_with_reply,
)
from healthbench.grading.settings import GraderConfig, GradingOptions
from healthbench.runs.pricing import PRICES
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY, check_against_reference, made_up_rows, sent_prompts
from tests.test_grade_cli import grade_replies

# Long enough that the part every item of a reply shares passes OpenAI's 1,024-token floor (four characters a token).
LONG_REPLY = "Drink water, rest, and watch for a stiff neck or a rash that does not fade. " * 80


def keys_by_reply(bodies: list[dict[str, Any]]) -> dict[str, set[Any]]:
    """Each grader request's prompt_cache_key, by the reply its prompt grades (its conversation's last turn; the
    rest may differ between items, where a conversation holds the template's `<<rubric_item>>`, as in
    `made_up_rows`, and the reference substitutes the item there too)."""
    found: dict[str, set[Any]] = defaultdict(set)
    for body in bodies:
        prompt = body["messages"][-1]["content"] if "messages" in body else body["input"][-1]["content"]
        conversation = prompt.split("# Conversation\n", 1)[1].split("\n\n# Rubric item\n", 1)[0]
        found[conversation.rsplit("\n\nassistant: ", 1)[-1]].add(body.get("prompt_cache_key"))
    return found


# One grader request out at a time, so that every request carries its key: at the default concurrency the slow
# start's first window is out before a new host has answered, and all of it but the first request goes without the
# key (`test_a_new_host_s_first_window_goes_without_the_key_but_its_first_request`).
ONE_AT_A_TIME = ("--concurrency", "1")


def test_a_new_host_s_first_window_goes_without_the_key_but_its_first_request(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = [make_row(f"t{i}", rubrics=[(1, f"Criterion {j}", ("axis:accuracy",)) for j in range(4)]) for i in range(6)]
    replies = {r["prompt_id"]: f"Reply to {r['prompt_id']}." for r in rows}
    assert fake.base_url
    result = grade_replies(tmp_path, rows, replies, "out", fake.base_url)
    assert result.exit_code == 0, result.output
    assert len(fake.bodies) == 24 > FIRST_WINDOW
    # Sent before the host's first answer said whether it takes the key (`api.hosts`): at most the window's others.
    assert sum("prompt_cache_key" not in body for body in fake.bodies) < FIRST_WINDOW
    by_reply = keys_by_reply(fake.bodies)
    assert len(by_reply) == len(rows)
    named = [keys - {None} for keys in by_reply.values()]
    assert all(len(keys) <= 1 for keys in named)  # never two keys for one reply's items
    assert len(set().union(*named)) == sum(len(keys) for keys in named)  # nor one key for two replies


def test_the_key_is_the_last_field_and_every_other_byte_stays() -> None:
    for body in (
        {"model": "m", "messages": [{"role": "user", "content": 'a "quoted" \u00e9'}], "temperature": 0.5},
        {"model": "m", "input": [{"role": "user", "content": "x"}], "reasoning": {"effort": "low"}},
    ):
        payload = json.dumps(body).encode()
        keyed = with_cache_key(payload, "healthbench-abc")
        assert keyed == json.dumps(body | {"prompt_cache_key": "healthbench-abc"}).encode()
        assert keyed.startswith(payload[:-1])
    with pytest.raises(ValueError):
        with_cache_key(b"[]", "k")


def test_default_grading_sends_one_key_per_reply_and_the_reference_prompts(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()
    replies = {r["prompt_id"]: f"Reply to {r['prompt_id']}: stay hydrated." for r in rows}
    assert fake.base_url
    result = grade_replies(tmp_path, rows, replies, "out", fake.base_url, *ONE_AT_A_TIME)
    assert result.exit_code == 0, result.output
    assert sent_prompts(fake) == check_against_reference(tmp_path / "out", rows, replies)  # the prompts, unchanged
    by_reply = keys_by_reply(fake.bodies)
    assert len(by_reply) == len(rows)
    assert all(len(keys) == 1 and None not in keys for keys in by_reply.values())  # one key for a reply's items
    assert len({key for keys in by_reply.values() for key in keys}) == len(rows)  # another for each task
    for body in fake.bodies:
        assert list(body)[-1] == "prompt_cache_key"  # after the reference's fields, which are unchanged
        assert {k: v for k, v in body.items() if k != "prompt_cache_key"} == {
            "model": "gpt-4.1-2025-04-14",
            "messages": body["messages"],
            "temperature": 0.5,
            "max_tokens": 2048,
        }
    grader = json.loads((tmp_path / "out" / "run.json").read_text())["spec"]["grader"]
    assert grader["prompt_cache_key"] is True and grader["calls"] == "per-item"
    assert grader["per_reply_template_sha256"] is None


def test_no_prompt_cache_key_sends_none(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = [make_row("a"), make_row("b")]
    assert fake.base_url
    result = grade_replies(tmp_path, rows, {"a": "Rest.", "b": "Rest."}, "out", fake.base_url, "--no-prompt-cache-key")
    assert result.exit_code == 0, result.output
    assert len(fake.bodies) == 4 and all("prompt_cache_key" not in body for body in fake.bodies)
    assert json.loads((tmp_path / "out" / "run.json").read_text())["spec"]["grader"]["prompt_cache_key"] is False
    assert GradingOptions(grader_prompt_cache_key=False).grader(None).prompt_cache_key is False  # Inspect, verifiers


def test_the_responses_api_carries_the_key_too(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = [make_row("a"), make_row("b")]
    model = ("--grader-model", "gpt-5.4-2026-03-05", "--grader-reasoning-effort", "low")
    flags = ("--grader-api", "responses", *model, *ONE_AT_A_TIME)
    assert fake.base_url
    result = grade_replies(tmp_path, rows, {"a": "Rest.", "b": "Sleep."}, "out", fake.base_url, *flags)
    assert result.exit_code == 0, result.output
    assert set(fake.paths) == {"/v1/responses"}  # the fake refuses what OpenAI refuses: it takes the key
    by_reply = keys_by_reply(fake.bodies)
    assert len(by_reply) == 2 and all(len(keys) == 1 and None not in keys for keys in by_reply.values())


def test_turning_the_key_on_or_off_asks_nothing_again(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_rows()[:6]
    replies = {r["prompt_id"]: "Rest." for r in rows}
    assert fake.base_url
    assert grade_replies(tmp_path, rows, replies, "out", fake.base_url, "--no-prompt-cache-key").exit_code == 0
    sent = len(fake.bodies)
    again = grade_replies(tmp_path, rows, replies, "out", fake.base_url)  # on, by default
    assert again.exit_code == 0, again.output
    assert len(fake.bodies) == sent and f"({sent} verdicts reused)" in again.output
    assert grade_replies(tmp_path, rows, replies, "out", fake.base_url, "--no-prompt-cache-key").exit_code == 0
    assert len(fake.bodies) == sent


def test_verdicts_are_stored_under_the_keys_of_runs_made_before(tmp_path: Path, fake: FakeOpenAI) -> None:
    """A run folder of the release before cache keys resumes: same identity, same verdict keys (the request as
    the reference sends it, with its sample and item)."""
    rows = [make_row("a")]
    assert fake.base_url
    assert grade_replies(tmp_path, rows, {"a": "Rest."}, "out", fake.base_url).exit_code == 0
    with sqlite3.connect(tmp_path / "out" / "progress.sqlite") as db:
        config = {key: json.loads(value) for key, value in db.execute("SELECT key, value FROM config")}
        stored = {key for (key,) in db.execute("SELECT key FROM verdicts")}
    assert {k: v for k, v in config.items() if k.startswith(("grader", "template"))} == {
        "grader_model": "gpt-4.1-2025-04-14",
        "template_sha256": TEMPLATE_SHA256,
    }
    grader = Grader(ApiClient("http://127.0.0.1:9/v1"))
    row = Row.model_validate(rows[0])
    conversation = render_conversation(transcript_with_reply(row.prompt, "Rest."))
    expected = set()
    for index, item in enumerate(row.rubrics):
        payload = json.dumps(grader.request_body(grader_prompt(conversation, rubric_item_text(item)))).encode()
        expected.add(request_key(payload + b"\0" + f"a#0/{index}".encode()))
    assert stored == expected


def test_cached_tokens_are_counted_and_cost_less(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = [make_row(f"t{i}", prompt=(("user", f"Question {i}: my head hurts."),)) for i in range(6)]
    rows.append(make_row("multi", rubrics=[(i + 1, f"Criterion {i}", ("axis:accuracy",)) for i in range(5)]))
    replies = {r["prompt_id"]: LONG_REPLY for r in rows}
    assert fake.base_url
    assert grade_replies(tmp_path, rows, replies, "on", fake.base_url, *ONE_AT_A_TIME).exit_code == 0
    fake.reset()
    assert grade_replies(tmp_path, rows, replies, "off", fake.base_url, "--no-prompt-cache-key").exit_code == 0
    on, off = (
        json.loads((tmp_path / name / "usage.json").read_text())["whole_run"]["grader"] for name in ("on", "off")
    )
    results = [json.loads(line) for line in (tmp_path / "on" / "results.jsonl").read_text().split("\n")[:-1]]
    assert on["cached_prompt_tokens"] == sum(r["usage"]["cached_prompt_tokens"] for r in results)
    items = sum(len(r["rubrics"]) for r in rows)
    # Every item of a reply but its first reads the shared start: 1,024 tokens and more.
    assert on["cached_prompt_tokens"] >= 1024 * (items - len(rows))
    assert off["cached_prompt_tokens"] == 0 and on["prompt_tokens"] == off["prompt_tokens"]
    price = PRICES["gpt-4.1"]
    saved = on["cached_prompt_tokens"] * (price.input - price.cached_input) / 1e6
    assert on["cost_usd"] == pytest.approx(off["cost_usd"] - saved, rel=1e-9)
    assert on["cache_saved_usd"] == pytest.approx(saved, rel=1e-9) and off["cache_saved_usd"] == 0


def test_batch_lines_carry_the_key_and_their_custom_id_is_the_line(tmp_path: Path) -> None:
    rows = [make_row("a"), make_row("b", prompt=(("user", "My knee hurts."),))]
    with FakeOpenAI(batch_delay=0.05) as server:
        assert server.base_url
        batch = ("--batch", "--poll-interval", "0.02")
        result = grade_replies(tmp_path, rows, {"a": "Rest.", "b": "Ice."}, "out", server.base_url, *batch)
        assert result.exit_code == 0, result.output
        files = [f for f in server.batch_api.files.values() if f.info["purpose"] == "batch"]
    lines = [json.loads(line) for f in files for line in f.data.decode().split("\n") if line]
    assert len(lines) == 4
    by_reply = keys_by_reply([line["body"] for line in lines])
    assert len(by_reply) == 2 and all(len(keys) == 1 and None not in keys for keys in by_reply.values())
    for line in lines:
        body = json.dumps(line["body"]).encode()  # the live request's bytes, as json.dumps writes them
        prompt_id = "a" if "Rest." in line["body"]["messages"][-1]["content"] else "b"
        idents = [f"{prompt_id}#0/{i}".encode() for i in range(2)]
        assert line["custom_id"] in {hashlib.sha256(body + b"\0" + ident).hexdigest() for ident in idents}


def test_meta_eval_keys_a_completion_s_rows_alike(tmp_path: Path, fake: FakeOpenAI) -> None:
    from tests.test_metaeval import made_up_meta_rows

    rows = made_up_meta_rows(12)
    for row in rows:  # one prompt per completion
        row["prompt"] = [{"role": "user", "content": f"About {row['completion_id']}: is this rash serious?"}]
    data = write_jsonl(tmp_path / "meta.jsonl", rows)
    assert fake.base_url
    args = ["meta-eval", "--data", str(data), "--out", str(tmp_path / "m"), "--grader-base-url", fake.base_url]
    result = CliRunner().invoke(main, [*args, *ONE_AT_A_TIME, "--no-progress"], env={"HEALTHBENCH_GRADER_API_KEY": KEY})
    assert result.exit_code == 0, result.output
    by_reply = keys_by_reply(fake.bodies)
    assert len(by_reply) == len({r["completion_id"] for r in rows})
    assert all(len(keys) == 1 and None not in keys for keys in by_reply.values())


def test_the_key_names_the_conversation_not_its_text() -> None:
    key = prompt_cache_key("user: a private question\n\nassistant: a reply")
    assert key.startswith("healthbench-") and len(key) == len("healthbench-") + 32 and "private" not in key
    assert key != prompt_cache_key("user: another question\n\nassistant: a reply")
    assert GraderConfig(prompt_cache_key=False).build().cache_key("x") is None


def test_serve_logs_the_hit_rate_and_what_it_saved_every_minute(fake: FakeOpenAI) -> None:
    import asyncio

    from healthbench.integrations.openreward.deployment import Deployment
    from healthbench.integrations.openreward.usagelog import UsageLog

    row = Row.model_validate(make_row("a", rubrics=[(i + 1, f"Criterion {i}", ("axis:accuracy",)) for i in range(4)]))
    now = [0.0]
    lines: list[dict[str, Any]] = []
    log = UsageLog(lambda **fields: lines.append(fields), clock=lambda: now[0])
    assert fake.base_url
    deployment = Deployment({"test": [row]}, GraderConfig(base_url=fake.base_url), usage_log=log)

    async def two_replies() -> None:
        # On one loop, as a server grades: the first reply's items go at once while the host is new, only the first
        # of them with the key; the second reply's all carry it.
        await deployment.grade("test", row, LONG_REPLY, "sk-test")
        assert lines == []  # not a minute yet
        now[0] = 61.0
        await deployment.grade("test", row, LONG_REPLY + " Sleep.", "sk-test")

    asyncio.run(two_replies())
    [line] = lines
    last = line["last"]
    assert line["seconds"] == 61.0 and last == line["since_start"] and last["replies"] == 2 and last["calls"] == 8
    assert last["cached_prompt_tokens"] >= 3 * 1024  # the second reply's three items after its first
    assert last["cache_hit_rate"] == pytest.approx(last["cached_prompt_tokens"] / last["prompt_tokens"], abs=1e-4)
    price = PRICES["gpt-4.1"]
    assert last["cache_saved_usd"] == pytest.approx(
        last["cached_prompt_tokens"] * (price.input - price.cached_input) / 1e6, abs=1e-4
    )
    now[0] = 70.0
    asyncio.run(deployment.grade("test", row, "Rest.", "sk-test"))
    assert len(lines) == 1  # the next line a minute after this one
