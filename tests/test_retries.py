"""The retry decision as data: the status table, the server's `x-should-retry` over it, one log line per retry with
the provider's request id and never the key, and the retry lines shown by the command line only when asked."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner

from healthbench.api.client import ApiClient, Retries
from healthbench.api.failures import status_failure
from healthbench.api.retrying import TABLE, Kind
from healthbench.cli import main
from healthbench.errors import RequestFailed
from healthbench.testing import Canned, FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.endpoints import loopback
from tests.reference import KEY

FAST = Retries(max_attempts=12, initial_backoff=0.001, max_backoff=0.001)
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
ANSWER = json.dumps({"choices": [{"message": {"role": "assistant", "content": "hi"}}]})
Scripted = tuple[int, dict[str, str], str]  # status, headers, body


@asynccontextmanager
async def scripted(answers: Sequence[Scripted]) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback endpoint giving `answers` in turn (the last one from then on); yields its URL and a one-item list
    counting the requests it got."""
    count = [0]

    async def handler(request: web.Request) -> web.Response:
        status, headers, body = answers[min(count[0], len(answers) - 1)]
        count[0] += 1
        text = body.replace("$KEY", request.headers.get("Authorization", ""))
        return web.Response(status=status, headers=headers, text=text, content_type="application/json")

    async with loopback("/v1/chat/completions", handler) as url:
        yield f"{url}/v1", count


def complete(answers: Sequence[Scripted], retry: Retries = FAST) -> tuple[str | BaseException, int, str]:
    """One call against `answers`: its content (or the error it raised), the requests made, and the URL."""

    async def one() -> tuple[str | BaseException, int, str]:
        async with scripted(answers) as (url, count):
            client = ApiClient(url, KEY, retry=retry)
            try:
                content, _ = await client.complete(BODY, lambda text: text)
                return content, count[0], url
            except RequestFailed as exc:
                return exc, count[0], url
            finally:
                await client.aclose()

    return asyncio.run(one())


def test_the_table_asks_again_what_openai_python_asks_again() -> None:
    kinds = {status: status_failure(status, b"{}", {}).kind for status in (400, 401, 404, 408, 409, 422, 429, 500, 503)}
    assert kinds == {
        400: Kind.REFUSED,
        401: Kind.REFUSED_REQUEST,
        404: Kind.REFUSED_REQUEST,
        408: Kind.SERVER_ERROR,
        409: Kind.SERVER_ERROR,
        422: Kind.REFUSED,
        429: Kind.RATE_LIMITED,
        500: Kind.SERVER_ERROR,
        503: Kind.SERVER_ERROR,
    }
    assert {kind for kind, rule in TABLE.items() if rule.retried} == {
        Kind.UNREACHABLE, Kind.NO_ANSWER, Kind.DROPPED, Kind.SERVER_ERROR, Kind.RATE_LIMITED, Kind.UNREADABLE,
        Kind.UNUSABLE_CONTENT, Kind.CUT_SHORT,
    }  # fmt: skip
    # An answer the output cap cut short is asked once more, never twelve times.
    assert TABLE[Kind.CUT_SHORT].attempts == 2
    # The server's word overrides the status, either way.
    assert not status_failure(503, b"", {"x-should-retry": "false"}).retried
    assert status_failure(400, b"", {"x-should-retry": "true"}).retried
    assert status_failure(503, b"", {"x-should-retry": "maybe"}).retried


def test_x_should_retry_false_ends_the_call_at_once() -> None:
    failed, made, _ = complete([(503, {"x-should-retry": "false"}, '{"error": {"message": "do not"}}')])
    assert isinstance(failed, RequestFailed) and failed.attempts == 1 and made == 1
    assert failed.status == 503 and "do not" in str(failed)


def test_x_should_retry_true_asks_a_4xx_again() -> None:
    answer, made, _ = complete([(400, {"x-should-retry": "true"}, '{"error": {"message": "busy"}}'), (200, {}, ANSWER)])
    assert answer == "hi" and made == 2
    # Without the header, the same 400 is the caller's to judge, at once.
    failed, made, _ = complete([(400, {}, '{"error": {"message": "busy"}}'), (200, {}, ANSWER)])
    assert isinstance(failed, RequestFailed) and failed.status == 400 and made == 1


def test_each_retry_logs_one_line_with_status_wait_attempt_and_request_id_and_never_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    echoed = '{"error": {"message": "upstream failed for $KEY"}}'
    with caplog.at_level(logging.INFO, logger="healthbench.api"):
        answer, made, url = complete([(500, {"x-request-id": "req_123"}, echoed)] * 2 + [(200, {}, ANSWER)])
    assert answer == "hi" and made == 3
    lines = [record.getMessage() for record in caplog.records if record.name == "healthbench.api"]
    assert len(lines) == 2
    assert lines[0].startswith(f"retrying POST {url}/chat/completions in 0.00 s, attempt 2 of 12, after HTTP 500: ")
    assert lines[1].startswith(f"retrying POST {url}/chat/completions in 0.00 s, attempt 3 of 12, after HTTP 500: ")
    assert all("Bearer [redacted]" in line and line.endswith("(x-request-id req_123)") for line in lines)
    assert KEY not in caplog.text


def test_the_command_line_shows_retry_lines_only_when_asked(tmp_path: Path) -> None:
    rows = [make_row(f"t{i}") for i in range(3)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    given = [{"prompt_id": row["prompt_id"], "response": "Rest."} for row in rows]
    replies = write_jsonl(tmp_path / "replies.jsonl", given)
    outputs = {}
    with FakeOpenAI(canned=Canned(500, '{"error": {"message": "upstream failed"}}')) as server:
        for level in ([], ["--log-level", "info"], ["-v"]):
            out = tmp_path / f"out{len(level)}"
            args = ["grade", "--data", str(data), "--responses", str(replies), "--out", str(out), "--no-progress"]
            args += ["--grader-base-url", server.base_url or ""]
            result = CliRunner().invoke(main, [*level, *args], env={"HEALTHBENCH_GRADER_API_KEY": KEY})
            assert result.exit_code == 1
            outputs[len(level)] = result.output.strip().splitlines()
    assert len(outputs[0]) == 1 and "gave no usable answer" in outputs[0][0]  # by default, the one line
    for shown in (outputs[1], outputs[2]):
        retries = [line for line in shown if line.startswith("healthbench: retrying POST ")]
        assert retries and len(shown) == len(retries) + 1 and "gave no usable answer" in shown[-1]
        assert all("after HTTP 500: " in line and KEY not in line for line in retries)
