"""Writing files so that a reader never sees half of one: the one atomic writer every output goes through."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from healthbench.errors import DiskFull, OutputUnusable


def write_atomic(path: Path, text: str) -> Path:
    """Write `text` to a temporary file beside `path` and rename it over `path`; returns `path`.

    Whatever fails, the temporary file is removed. The file is readable by all (0644, not mkstemp's 0600):
    results, reports and caches are meant to be shared. `OutputUnusable`, naming `path`, when it cannot be
    written.
    """
    try:
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    except OSError as exc:
        raise unusable(path, exc) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise unusable(path, exc) from None
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: Path, value: Any) -> Path:
    """`value` as indented JSON, written atomically. A number that is not finite is no JSON (`Infinity` and `NaN`
    are Python's, and other readers refuse them): `OutputUnusable`, naming `path`, and nothing is written."""
    try:
        text = json.dumps(value, indent=2, allow_nan=False)
    except ValueError:
        raise OutputUnusable(
            path, "it would hold a number that is not finite (infinity or NaN), which is no JSON"
        ) from None
    return write_atomic(path, text + "\n")


def unusable(path: Path, exc: OSError, store: Path | None = None) -> OutputUnusable:
    """The error for `path` that could not be written: `DiskFull` (naming the space left) when its disk is full,
    with the `store` that keeps what was answered when there is one."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(path, store)
    return OutputUnusable(path, exc.strerror or str(exc))


def disk_full(path: Path, store: Path | None = None) -> DiskFull:
    """`DiskFull` for `path`, with the space its disk has left."""
    for where in (path, *path.parents):
        try:
            return DiskFull(path, shutil.disk_usage(where).free, store)
        except OSError:
            continue
    return DiskFull(path, 0, store)
