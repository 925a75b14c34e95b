"""Writing files so that a reader never sees half of one: the one atomic writer every output goes through."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from healthbench.errors import OutputUnusable


def write_atomic(path: Path, text: str | bytes) -> Path:
    """Write `text` (UTF-8 text, or bytes as they are) to a temporary file beside `path` and rename it over
    `path`; returns `path`.

    Whatever fails, the temporary file is removed. The file is readable by all (0644, not mkstemp's 0600):
    results, reports and caches are meant to be shared. `OutputUnusable`, naming `path`, when it cannot be
    written.
    """
    try:
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    except OSError as exc:
        raise OutputUnusable(path, exc.strerror or str(exc)) from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(text.encode("utf-8") if isinstance(text, str) else text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise OutputUnusable(path, exc.strerror or str(exc)) from None
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: Path, value: Any) -> Path:
    """`value` as indented JSON, written atomically."""
    return write_atomic(path, json.dumps(value, indent=2) + "\n")
