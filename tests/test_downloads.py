"""Failed downloads: one message naming the file, the URL, the cause and the offline ways (--data only where the
command takes it); nothing left in the cache; and from the command line (`download`, `serve`) exit status 1
with no traceback.

Every host here is on 127.0.0.1: a bound socket that does not listen (refused), and a tiny aiohttp server
that answers 404 or 500, stalls before or during the body, or cuts the body short.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from healthbench.data import professional, subsets
from healthbench.data.cache import OVERRIDE_ENV
from healthbench.data.subsets import Subset
from healthbench.errors import DataError
from tests.conftest import make_row, write_jsonl

BODY = b'{"made-up": "bytes"}\n' * 100


class Host:
    """An aiohttp server in a thread of its own; `url` is the mirror root for HEALTHBENCH_BASE_URL."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.release = asyncio.Event()  # set at shutdown, so stalled handlers finish
        app = web.Application()
        app.router.add_get("/{kind}/{name}", self.answer)
        self.runner = web.AppRunner(app, shutdown_timeout=0)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def answer(self, request: web.Request) -> web.StreamResponse:
        kind = request.match_info["kind"]
        if kind in ("404", "500"):
            return web.Response(status=int(kind), text="nope")
        if kind == "stall":
            await self.release.wait()
            return web.Response(status=503)
        response = web.StreamResponse(headers={"Content-Length": str(len(BODY))})
        await response.prepare(request)
        await response.write(BODY[: len(BODY) // 2])
        if kind == "stall-body":
            await self.release.wait()
        else:  # "short": the connection ends halfway through the announced body
            assert request.transport is not None
            request.transport.close()
        return response

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.release.set)
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    server = Host()
    yield server
    server.close()


@pytest.fixture
def refused() -> Iterator[str]:
    """A loopback address nothing listens on: bound, so no other process can take the port meanwhile."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("HEALTHBENCH_CACHE_DIR", str(folder))
    monkeypatch.delenv("HEALTHBENCH_DATA_DIR", raising=False)
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    monkeypatch.setattr(subsets, "TIMEOUT", 0.5)  # a stalled host fails in half a second, not a minute
    return folder


def failure(name: str = "full") -> str:
    with pytest.raises(DataError) as caught:
        subsets.subset_path(name)
    return str(caught.value)


def assert_offline_ways(message: str, subset: Subset) -> None:
    assert message.startswith(f"could not download {subset.filename} (HealthBench {subset.name}) from {subset.url}: ")
    # The data layer names the way every command has; a command that takes --data adds it (below).
    assert message.endswith(f"To work offline, set HEALTHBENCH_DATA_DIR to a folder holding {subset.filename}.")


@pytest.mark.parametrize(
    ("kind", "cause"),
    [
        ("404", "HTTP 404 (Not Found)"),
        ("500", "HTTP 500 (Internal Server Error)"),
        ("stall", "no answer within 0.5 s"),
        ("stall-body", "no answer within 0.5 s"),
        ("short", "the connection closed after 1,050 of 2,100 bytes"),
    ],
)
def test_each_failure_is_one_message_and_leaves_nothing(
    host: Host, cache: Path, monkeypatch: pytest.MonkeyPatch, kind: str, cause: str
) -> None:
    monkeypatch.setenv("HEALTHBENCH_BASE_URL", f"{host.url}/{kind}/")
    message = failure()
    subset = subsets.SUBSETS["full"]
    assert_offline_ways(message, subset)
    assert f"{host.url}/{kind}/{subset.filename}: {cause}" in message
    assert not cache.exists() or not list(cache.iterdir())  # no partial file, no sidecar, under any name


def test_refused_connection_names_the_cause(refused: str, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEALTHBENCH_BASE_URL", refused)
    message = failure("meta")
    assert_offline_ways(message, subsets.SUBSETS["meta"])
    assert "ConnectionRefusedError" in message
    assert not list(cache.iterdir())


def test_a_hash_mismatch_names_the_url_intact(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A download that arrives whole but differs from the official file: refused, nothing cached either.
    served = write_jsonl(tmp_path / "file.jsonl", [make_row("a")])
    subset = Subset("full", "file.jsonl", hashlib.sha256(b"another file").hexdigest(), 1)
    monkeypatch.setitem(subsets.SUBSETS, "full", subset)
    monkeypatch.setenv("HEALTHBENCH_BASE_URL", served.parent.as_uri())
    message = failure()
    assert message.startswith(f"{subset.url}: sha256 {hashlib.sha256(served.read_bytes()).hexdigest()}")
    assert subset.url.startswith("file:///") and not list(cache.iterdir())


# From the command line, as a newcomer meets it.


def run_cli(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HEALTHBENCH_", "HF_"))}
    clean.update(HEALTHBENCH_CACHE_DIR=str(tmp_path / "cache"), **env)
    return subprocess.run(
        [sys.executable, "-m", "healthbench", *args], env=clean, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "takes_data"),
    [
        (["download", "full"], False),
        (["download", "--subset", "full"], False),
        (["serve", "--subset", "full", "--port", "0"], True),
        (["serve", "--port", "0"], True),
    ],
    ids=["download", "download-subset", "serve", "serve-default"],
)
def test_cli_without_a_route_exits_1_without_traceback(
    refused: str, tmp_path: Path, args: list[str], takes_data: bool
) -> None:
    done = run_cli(args, tmp_path, HEALTHBENCH_BASE_URL=refused)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output
    assert f"{refused}/{subsets.SUBSETS['full'].filename}" in output and "HEALTHBENCH_DATA_DIR" in output
    # The way out that the command has: --data only where it takes --data.
    assert ("--data PATH" in output) == takes_data and len(done.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "cache").iterdir())


def test_cli_professional_fails_alike(refused: str, tmp_path: Path) -> None:
    done = run_cli(["download", "professional"], tmp_path, HF_ENDPOINT=refused, HF_HUB_OFFLINE="0")
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output
    assert f"could not download {professional.PROFESSIONAL_FILENAME} of the Hugging Face dataset" in output
    assert f"from {refused}/" in output and "HEALTHBENCH_DATA_DIR" in output and "--data" not in output
    cache = tmp_path / "cache"
    assert not cache.exists() or not list(cache.iterdir())


def test_grading_commands_offer_their_data_flag(refused: str, tmp_path: Path) -> None:
    # The shared download error, said by a command that takes --data: the way it has besides the folder.
    replies = write_jsonl(tmp_path / "replies.jsonl", [{"prompt_id": "a", "response": "Rest."}])
    args = ["grade", "--subset", "hard", "--responses", str(replies), "--out", str(tmp_path / "out")]
    done = run_cli(args, tmp_path, HEALTHBENCH_BASE_URL=refused)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    holding = f"set HEALTHBENCH_DATA_DIR to a folder holding {subsets.SUBSETS['hard'].filename}, or pass --data PATH."
    assert holding in done.stderr and len(done.stderr.strip().splitlines()) == 1
