"""A real `sglang-router` (SGLang Model Gateway: a Rust binary in its PyPI wheel, pinned in scripts/dev) started in
front of fake judges on loopback, for tests/test_router.py and benchmarks/bench_judge_pool.py: the router's process on
free ports, a bounded wait until it has registered the judges, and its kill at the end. It registers a judge only once
the judge's `GET /health` answers 2xx, as the fake's does (its first probe's path is fixed: `--health-check-endpoint`
moves only the periodic check)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# How long the router may take to register its judges: generous for a loaded 2-core machine (it takes well under a
# second on a quiet one); a bound, not a timing.
READY_S = 60.0
# The router colours its log.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
def sglang_router(judges: Sequence[str], log: Path, *flags: str, key: str | None = None) -> Iterator[Router]:
    """sglang-router in front of the judges whose base URLs (ending in /v1) are `judges`, on a free loopback port,
    with `flags` after its own (a policy, thresholds) and `key` as its `--api-key` (which it then wants of every
    caller), its output in `log`; yielded once it has registered every judge as healthy, killed on exit whatever
    happens. Raises RuntimeError, with the log's end, if it has not within READY_S."""
    workers = [url.removesuffix("/v1") for url in judges]
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
            failed = "exited" if process.poll() is not None else f"did not register them within {READY_S:.0f} s"
            raise RuntimeError(f"sglang-router in front of {len(workers)} judges {failed}" + router.tail())
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
