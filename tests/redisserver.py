"""A real `redis-server` on a free loopback port for the tests of the shared pace: no persistence, no files, killed
at the end (SIGKILL: SIGTERM waits for Redis's timer, and nothing is kept). Tests that use it are skipped when
redis-server is not installed (CI installs Debian's)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")


class RedisServer:
    """One throwaway server; `kill` and `start` again on the same port to play an outage."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(self.folder), "--loglevel", "warning",
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._process = process
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as connection:
                    connection.sendall(b"PING\r\n")
                    if connection.recv(7).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                error = process.stderr.read().decode() if process.stderr else ""
                pytest.fail(f"redis-server did not start: {error}")
            time.sleep(0.01)  # polling for the server to listen, not timing anything

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            if self._process.stderr:
                self._process.stderr.close()
            self._process = None


def redis_server(folder: Path) -> Iterator[RedisServer]:
    """A started server for a fixture to yield; killed when the fixture ends."""
    server = RedisServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.kill()
