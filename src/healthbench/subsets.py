"""The official HealthBench files: where they live, what they must hash to, and a checked local cache.

A named subset resolves to a local file in this order: `HEALTHBENCH_DATA_DIR` (a folder the user filled
with the official file names, for offline machines), else the cache (`HEALTHBENCH_CACHE_DIR`, default
under the user's cache folder), downloading into it when missing. Each file is checked against the sha256
recorded by other projects and its row count; the cache keeps a sidecar with the hash it accepted, so a
file changed later is noticed.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from tqdm import tqdm

from .data import DataError, MetaRow, Row, load_meta_rows, load_rows

BASE_URL = "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/"
OVERRIDE_ENV = "HEALTHBENCH_ALLOW_SHA256_MISMATCH"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Subset:
    """One official file: its name, expected sha256 and row count."""

    name: str
    filename: str
    sha256: str
    rows: int

    @property
    def url(self) -> str:
        """Where the file is downloaded from (`HEALTHBENCH_BASE_URL` can point at a mirror)."""
        return os.environ.get("HEALTHBENCH_BASE_URL", BASE_URL).rstrip("/") + "/" + self.filename


SUBSETS: dict[str, Subset] = {
    s.name: s
    for s in (
        Subset(
            "full",
            "2025-05-07-06-14-12_oss_eval.jsonl",
            "e99dd3c6372c10d6fcc5e385c5fae69d0dd40392dae56836ef9493ae324ecd2f",
            5000,
        ),
        Subset(
            "hard",
            "hard_2025-05-08-21-00-10.jsonl",
            "b0320430e5cd974e746585594c1dd10b5a3fc2aff9c72b26106c2c4a069d74e9",
            1000,
        ),
        Subset(
            "consensus",
            "consensus_2025-05-09-20-00-46.jsonl",
            "fabe37553327238928b05357d8b309737b5d426d6dee432a3376da618d0969d6",
            3671,
        ),
        Subset(
            "meta",
            "2025-05-07-06-14-12_oss_meta_eval.jsonl",
            "6a343ed3fcb6f28353c2c6c157ae30ddf2db874c947b27ba474ad54da9c5dbac",
            29511,
        ),
    )
}


def _allow_mismatch() -> bool:
    return os.environ.get(OVERRIDE_ENV, "") not in ("", "0")


def cache_dir() -> Path:
    """The download cache folder."""
    configured = os.environ.get("HEALTHBENCH_CACHE_DIR")
    return Path(configured) if configured else Path(platformdirs.user_cache_dir("healthbench"))


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_hash(subset: Subset, path: Path, actual: str) -> None:
    if actual != subset.sha256 and not _allow_mismatch():
        raise DataError(
            f"{path}: sha256 {actual} does not match the official {subset.name} file's {subset.sha256}. "
            f"The file may be truncated or a drifted mirror; delete it to download again, or set "
            f"{OVERRIDE_ENV}=1 to use it anyway."
        )


def _download(subset: Subset, target: Path) -> str:
    """Download to a temporary file beside `target`, hash while writing, then rename into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(subset.url, timeout=60) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"healthbench {subset.name}") as bar:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        actual = digest.hexdigest()
        _check_hash(subset, Path(subset.url), actual)
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return actual


def subset_path(name: str) -> Path:
    """A checked local copy of the named subset's file, downloaded on first use."""
    if name not in SUBSETS:
        raise DataError(f"unknown subset {name!r}; choose one of {', '.join(SUBSETS)}")
    subset = SUBSETS[name]
    data_dir = os.environ.get("HEALTHBENCH_DATA_DIR")
    if data_dir:
        path = Path(data_dir) / subset.filename
        if not path.is_file():
            raise DataError(f"{path}: not found (HEALTHBENCH_DATA_DIR names a folder holding the official files)")
        _check_hash(subset, path, file_sha256(path))
        return path
    path = cache_dir() / subset.filename
    sidecar = path.with_name(path.name + ".sha256")
    if path.is_file() and sidecar.is_file():
        recorded = sidecar.read_text().strip()
        actual = file_sha256(path)
        if actual != recorded:
            raise DataError(
                f"{path}: changed since it was downloaded (sha256 {actual}, recorded {recorded}); "
                "delete it to download again"
            )
        return path
    actual = _download(subset, path)
    sidecar.write_text(actual + "\n")
    return path


def _check_count(subset: Subset, path: Path, count: int) -> None:
    if count != subset.rows and not _allow_mismatch():
        raise DataError(
            f"{path}: {count} rows, the official {subset.name} file has {subset.rows}; "
            f"set {OVERRIDE_ENV}=1 to use it anyway"
        )


def load_subset(name: str) -> list[Row]:
    """Load a named task subset (`full`, `hard` or `consensus`), checked."""
    if name == "meta":
        raise DataError("subset 'meta' holds meta-evaluation rows; load it with load_meta_subset")
    path = subset_path(name)
    rows = load_rows(path)
    _check_count(SUBSETS[name], path, len(rows))
    return rows


def load_meta_subset() -> list[MetaRow]:
    """Load the meta-evaluation file, checked."""
    path = subset_path("meta")
    rows = load_meta_rows(path)
    _check_count(SUBSETS["meta"], path, len(rows))
    return rows
