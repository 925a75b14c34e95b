"""A real `sglang-router` (SGLang Model Gateway: a Rust binary in its PyPI wheel, pinned in scripts/dev) started in
front of fake judges on loopback, for tests/test_router.py and benchmarks/bench_router.py: the fake judges it can
register, the router's process on free ports, a bounded wait until it has registered them, and its kill at the end."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from healthbench.testing import FakeOpenAI
from healthbench.testing.canned import CannedAnswers

# How long the router may take to register its judges: generous for a loaded 2-core machine (it takes well under a
# second on a quiet one); a bound, not a timing.
READY_S = 60.0
# The router colours its log.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Healthy(CannedAnswers):
    """The fake's middleware, answering `GET /health` with 200 where the fake itself has no such route.

    sglang-router registers a worker only once `GET /health` answers 2xx (its first probe's path is fixed;
    `--health-check-endpoint` moves only the periodic check), as vLLM's and SGLang's servers do. A stopgap until the
    fake answers /health itself (issue 43, item 7): a route of its own answers first, and this stands aside."""

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """The fake's answer, or 200 to a `GET /health` it would answer 404."""
        try:
            return await super().middleware(request, handler)
        except web.HTTPNotFound:
            if request.method == "GET" and request.path == "/health":
                return web.Response(text="OK")
            raise


def judge(latency: float = 0.0) -> FakeOpenAI:
    """A fake judge answering in `latency` seconds, not yet started, that the router can register."""
    server = FakeOpenAI(latency=latency)
    server._canned = _Healthy(server)
    return server


def free_port() -> int:
    """A loopback port free at the time of asking."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Router:
    """A running router: its OpenAI-compatible base URL and its log file."""

    base_url: str
    log: Path

    def tail(self) -> str:
        """The end of the router's log, for a failure's message."""
        return "\nsglang-router's log ends:\n" + ANSI.sub("", self.log.read_text(errors="replace"))[-3000:]


@contextmanager
def sglang_router(judges: Sequence[FakeOpenAI], log: Path, *flags: str, key: str | None = None) -> Iterator[Router]:
    """sglang-router in front of the started `judges` on a free loopback port, with `flags` after its own (a policy,
    thresholds) and `key` as its `--api-key` (which it then wants of every caller), its output in `log`; yielded
    once it has registered every judge as healthy, killed on exit whatever happens. Raises RuntimeError, with the
    log's end, if it has not within READY_S."""
    workers = [server.base_url.removesuffix("/v1") for server in judges if server.base_url]
    port = free_port()
    command = [
        sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *workers,
        "--host", "127.0.0.1", "--port", str(port),
        # Its Prometheus exporter listens on 0.0.0.0:29000 unless told: loopback, and a port of its own.
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), *flags,
        *(["--api-key", key] if key else []),
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    router = Router(f"{base}/v1", log)
    try:
        if not registered(base, set(workers), process, key):
            raise RuntimeError(
                f"sglang-router did not register its {len(workers)} judges as healthy within {READY_S:.0f} s"
                + router.tail()
            )
        yield router
    finally:
        process.kill()
        process.wait()


def registered(base: str, workers: set[str], process: subprocess.Popen[bytes], key: str | None) -> bool:
    """Poll the router's `/workers` (with `key`, if it wants one) until every one of `workers` is listed healthy
    (True), or the router exits or READY_S pass (False)."""
    request = urllib.request.Request(f"{base}/workers", headers={"Authorization": f"Bearer {key}"} if key else {})
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                listed = json.loads(answer.read())["workers"]
        except (OSError, urllib.error.URLError, ValueError):
            listed = []
        if {worker["url"] for worker in listed if worker["is_healthy"]} >= workers:
            return True
        time.sleep(0.05)  # polling for the router to register its judges, not timing anything
    return False
