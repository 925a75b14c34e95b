"""A command run as a user runs it, to be stopped partway through: `healthbench` in a process of its own that a
signal reaches as a shell's would, and an event for the moment the fake has been asked enough to stop it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def cli_process(args: Sequence[str], env: Mapping[str, str], setup: str = "") -> subprocess.Popen[str]:
    """`healthbench ARGS` in a process of its own, with `env` over this process's environment and its output piped as
    text; `setup` is Python it runs first. Its SIGINT is the default, as a shell's Ctrl-C finds it: pytest's
    children may inherit it ignored."""
    code = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    code += setup
    code += "from healthbench.cli import main; sys.argv[0] = 'healthbench'; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def set_after(requests: int) -> tuple[threading.Event, Callable[[dict[str, Any]], None]]:
    """An event set when the `requests`-th request comes, and for `FakeOpenAI(respond=...)` the hook that counts
    them (it returns nothing, so the fake answers every request as it would without it)."""
    reached = threading.Event()
    seen = 0

    def count(body: dict[str, Any]) -> None:
        nonlocal seen
        seen += 1
        if seen == requests:
            reached.set()

    return reached, count
