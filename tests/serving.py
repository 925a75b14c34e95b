"""`healthbench serve` as a user runs it: a process of its own on a free loopback port, graded by the fake, and the
replies a harness submitted graded again by `healthbench grade` for comparison."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from healthbench.testing import GRADER_MARKER
from tests.conftest import write_jsonl
from tests.reference import KEY
from tests.test_grade_cli import grade

UNGRADABLE = "UNGRADABLE"  # a reply containing this never gets a verdict from a fake given `fails_marked`


def fails_marked(body: dict[str, Any]) -> bool:
    """For `FakeOpenAI(fail_always=...)`: every grader request about a reply marked UNGRADABLE fails; any other
    request (one without chat messages too: a Responses request, a policy's) is answered as ever."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return False
    text = messages[-1]["content"]
    return GRADER_MARKER in text and UNGRADABLE in text


# What a server must never read for its grader: set to a port nothing listens on, so following it would fail.
POLICY_BASE_URL = "http://127.0.0.1:9/v1"


@contextmanager
def served(data: Path, grader_url: str | None, *flags: str, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """`healthbench serve --data DATA FLAGS` with its grader at `grader_url` (None: as `env` says); yields the
    server's URL (see `served_with_log`)."""
    with served_with_log(data, grader_url, *flags, env=env) as (url, _):
        yield url


@contextmanager
def served_with_log(
    data: Path, grader_url: str | None, *flags: str, env: Mapping[str, str] | None = None
) -> Iterator[tuple[str, list[str]]]:
    """`healthbench serve --data DATA FLAGS` with its grader at `grader_url` (None: as `env` says); yields the
    server's URL and the lines it has printed so far (the list grows as it prints).

    The server's environment has no grader key and no token of its own unless `env` gives them, and points
    `OPENAI_BASE_URL` at nothing, as a trainer that sets it for its policy would. On exit the key must not
    appear anywhere in the server's output, and the server must have closed every grader client it opened.
    """
    names = ("OPENAI_API_KEY", "HEALTHBENCH_GRADER_API_KEY", "CHAT_API_KEY", "CHAT_BASE_URL")
    environ = {k: v for k, v in os.environ.items() if k not in names and k != "HEALTHBENCH_DEFAULT_ENVIRONMENT"}
    unset = (
        "HEALTHBENCH_GRADER_BASE_URL",
        "OPENREWARD_LOG_LEVEL",
        "LOG_LEVEL",
        "HEALTHBENCH_SERVER_TOKEN",
        "HEALTHBENCH_NO_AUTH",
    )
    for name in unset:
        environ.pop(name, None)
    environ.update(PYTHONUNBUFFERED="1", OPENAI_BASE_URL=POLICY_BASE_URL, **(env or {}))
    if grader_url is not None:
        environ["HEALTHBENCH_GRADER_BASE_URL"] = grader_url
    command = [sys.executable, "-m", "healthbench", "serve", "--data", str(data), "--host", "127.0.0.1", "--port", "0"]
    with server_process([*command, "--max-attempts", "2", *flags], environ) as (url, lines):
        yield url, lines
    output = "".join(lines)
    assert KEY not in output
    assert "Unclosed client session" not in output, output


@contextmanager
def server_process(command: Sequence[str], env: Mapping[str, str]) -> Iterator[tuple[str, list[str]]]:
    """Run a server `command` that says "Uvicorn running on URL"; yields the URL and the lines it has printed so
    far (the list grows as it prints), and stops it on exit."""
    process = subprocess.Popen(
        list(command), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if "Uvicorn running on" in line:
                started.set()
        started.set()  # the process ended: the assertion below shows its output

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(120), "server did not start"
        found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", "".join(lines))
        assert found, "".join(lines)
        yield found.group(1), lines
    finally:
        process.terminate()
        process.wait(60)
        reader.join()


def log_until_marker(url: str, lines: list[str], start: int, headers: Mapping[str, str] | None = None) -> str:
    """The server's log lines from `start` up to a marker's, without colours: the marker is a request for an
    environment of a new name, which the server refuses with one warning line naming it, written after every
    line of the requests answered before it (waited for: at most 30 s). `headers`: the server's token, if it
    needs one."""
    marker = f"marker-{uuid.uuid4().hex[:12]}"

    async def refused() -> None:
        async with aiohttp.ClientSession() as http, http.get(f"{url}/{marker}/tools", headers=headers) as response:
            assert response.status == 404, await response.text()

    asyncio.run(refused())
    for _ in range(3000):
        for index in range(start, len(lines)):
            if marker in lines[index]:
                return "".join(strip_colour(line) for line in lines[start:index])
        time.sleep(0.01)  # the reader thread has not read the marker's line yet
    raise AssertionError("the marker's log line never came")


def server_pid(lines: Sequence[str]) -> int:
    """The process id uvicorn says it serves from ("Started server process [N]")."""
    found = re.search(r"Started server process \[(\d+)\]", "".join(lines))
    assert found, "".join(lines)
    return int(found.group(1))


def peak_memory_kb(pid: int) -> int:
    """The most resident memory process `pid` has had (VmHWM), in kB: a high-water mark, so a request's peak shows
    however short it was."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, flags=re.MULTILINE)
    assert found, status
    return int(found.group(1))


def strip_colour(line: str) -> str:
    """A log line without its terminal colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", line)


def graded_by_cli(
    tmp: Path, data: Path, replies: Mapping[str, str], grader_url: str, out: str = "grade", flags: Sequence[str] = ()
) -> dict[str, dict[str, Any]]:
    """`healthbench grade` on `replies` (prompt_id to reply) against the same grader, with `flags`, into `tmp/out`:
    the results by prompt_id."""
    responses = write_jsonl(tmp / f"{out}.jsonl", [{"prompt_id": k, "response": v} for k, v in replies.items()])
    result = grade(tmp, data, responses, out, grader_url, *flags)
    assert result.exit_code == 0, result.output
    lines = (tmp / out / "results.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
    return {record["prompt_id"]: record for record in map(json.loads, lines)}


DOC = Path(__file__).parents[1] / "docs" / "integrations.md"


def doc_block(name: str) -> str:
    """The Python block of docs/integrations.md whose first line names the file `name` (`# name: ...`)."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    [block] = [b for b in blocks if b.startswith(f"# {name}:")]
    return str(block)


def doc_function(name: str, function: str) -> Any:
    """Function `function` of the documented file `name`, defined as a reader who runs the file would."""
    namespace: dict[str, Any] = {"__name__": name.removesuffix(".py")}
    exec(compile(doc_block(name), str(DOC), "exec"), namespace)
    return namespace[function]
