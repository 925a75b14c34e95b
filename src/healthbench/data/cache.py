"""Where official files live on this machine: the download cache, the user's own folder of official files, the
variables that allow a file that does not match, and a file's sha256.

A download reports its bytes through a `Transfer` the caller gives (the command line draws a bar); the library
itself shows nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

import platformdirs

from healthbench.errors import DataError

OVERRIDE_ENV = "HEALTHBENCH_ALLOW_SHA256_MISMATCH"
ROW_COUNT_ENV = "HEALTHBENCH_ALLOW_ROW_COUNT_MISMATCH"
DATA_DIR_ENV = "HEALTHBENCH_DATA_DIR"
CHUNK = 1 << 20


class Transfer(Protocol):
    """Shown a download as it goes: called with its name and size (None: unknown), it gives the function that
    is told of each chunk's bytes, for as long as the download lasts."""

    def __call__(self, name: str, total: int | None) -> AbstractContextManager[Callable[[int], None]]: ...


@contextmanager
def unseen(name: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """The `Transfer` of a caller that shows nothing."""
    yield lambda _received: None


def allowed(variable: str) -> bool:
    """Whether an override variable is set (to anything but empty or 0)."""
    return os.environ.get(variable, "") not in ("", "0")


def allow_mismatch() -> bool:
    """Whether a file whose sha256 is not the official one may be used."""
    return allowed(OVERRIDE_ENV)


def cache_dir() -> Path:
    """The download cache folder."""
    configured = os.environ.get("HEALTHBENCH_CACHE_DIR")
    return Path(configured) if configured else Path(platformdirs.user_cache_dir("healthbench"))


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def data_dir_path(filename: str) -> Path | None:
    """The file in `HEALTHBENCH_DATA_DIR` when that is set (an error if it is not there), else None."""
    data_dir = os.environ.get(DATA_DIR_ENV)
    if not data_dir:
        return None
    path = Path(data_dir) / filename
    if not path.is_file():
        raise DataError(f"{path}: not found ({DATA_DIR_ENV} names a folder holding the official files)")
    return path
