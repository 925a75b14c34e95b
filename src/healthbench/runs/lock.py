"""One writer per run folder: a run holds an exclusive OS lock on a file in its folder for its whole life.

The lock is `fcntl.flock` on `writer.lock`: the kernel drops it when the process ends, however it ends (a
SIGKILL, an OOM kill, a lost node), so no stale lock is ever left behind and nothing needs cleaning up. The file
holds the pid of the process that holds it, for the message of the command that finds it taken; the file itself
means nothing without the lock, and is left in place.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from healthbench.errors import FolderBusy, OutputUnusable, RunBeingWritten

LOCK = "writer.lock"


def _pid(handle: int) -> int | None:
    """The pid written in the lock file, or None when it holds none (a writer between locking and writing it)."""
    os.lseek(handle, 0, os.SEEK_SET)
    text = os.read(handle, 64).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


@contextmanager
def writing(folder: Path) -> Iterator[None]:
    """Hold `folder`'s writer lock while the block runs, making the folder if need be; `FolderBusy`, naming the
    folder and the process holding it, when a live process holds it already. The lock is not re-entrant: one
    command takes it once."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OutputUnusable(exc.filename or folder, exc.strerror or str(exc)) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusy(folder, _pid(handle)) from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(handle)  # closing the last descriptor releases the lock


def writer(folder: Path) -> int | None:
    """The pid of the live process writing `folder` (0 when it is unknown), or None when none is."""
    try:
        handle = os.open(folder / LOCK, os.O_RDONLY)
    except OSError:
        return None  # no lock file: no run has ever held the folder, or it is not a run folder
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid(handle) or 0
        return None
    finally:
        os.close(handle)


def refuse_if_written(folder: Path) -> None:
    """`RunBeingWritten` when a live run holds `folder`: a reader takes it for the unfinished run it is."""
    pid = writer(folder)
    if pid is not None:
        raise RunBeingWritten(folder, pid or None)
