"""The official HealthBench files: where they live, what they must hash to, and a checked local cache.

A named subset resolves to a local file in this order: `HEALTHBENCH_DATA_DIR` (a folder the user filled
with the official file names, for offline machines), else the cache (`HEALTHBENCH_CACHE_DIR`, default
under the user's cache folder), downloading into it when missing. Each file is checked against the sha256
recorded by other projects and its row count; the cache keeps a sidecar with the hash it accepted, so a
file changed later is noticed. Each check has its override: `HEALTHBENCH_ALLOW_SHA256_MISMATCH` for a hash,
`HEALTHBENCH_ALLOW_ROW_COUNT_MISMATCH` for a row count (a file accepted with another hash is not the official
file, so its row count is not held to the official one either).

HealthBench Professional comes from the Hugging Face Hub instead (`professional`).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from healthbench.data.cache import (
    CHUNK,
    DATA_DIR_ENV,
    OVERRIDE_ENV,
    ROW_COUNT_ENV,
    Transfer,
    allow_mismatch,
    allowed,
    cache_dir,
    data_dir_path,
    file_sha256,
    unseen,
)
from healthbench.data.loading import load_meta_rows, load_professional_rows, load_rows
from healthbench.data.professional import professional_path
from healthbench.data.schema import MetaRow, Row
from healthbench.errors import DataError, DownloadFailed
from healthbench.files import write_atomic

BASE_URL = "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/"
# Seconds a connection may go without a byte (connecting, or between reads) before the download fails.
TIMEOUT = 60.0


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


PROFESSIONAL = "professional"
PROFESSIONAL_ROWS = 525
# The subsets whose rows are tasks (SUBSETS holds the files on OpenAI's blob store, meta-eval included).
TASK_SUBSETS = ("full", "hard", "consensus", PROFESSIONAL)
DOWNLOADABLE = (*TASK_SUBSETS, "meta")


def _check_hash(subset: Subset, where: str, actual: str, *, yours: bool = False) -> None:
    """Refuse a file that is not the official one, unless the mismatch is allowed. `yours`: the file is the
    user's own copy in `HEALTHBENCH_DATA_DIR` (never downloaded over), else a download (never kept)."""
    if actual == subset.sha256 or allow_mismatch():
        return
    mismatch = f"{where}: sha256 {actual} does not match the official {subset.name} file's {subset.sha256}"
    if yours:
        raise DataError(
            f"{mismatch}: it is not the official file. To use it anyway, set {OVERRIDE_ENV}=1; to use the official "
            f"file, put it in its place, or unset {DATA_DIR_ENV} and it is downloaded."
        )
    raise DataError(
        f"{mismatch}. The download may have been cut short, or the mirror may hold another file; nothing was "
        f"kept. Try again, or set {OVERRIDE_ENV}=1 to use it anyway."
    )


def _cause(exc: BaseException) -> str:
    """What went wrong on the wire, in a few words: the HTTP status, a timeout, or the socket's own error."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}" + (f" ({exc.reason})" if exc.reason else "")
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return f"no answer within {TIMEOUT:g} s"
    if isinstance(reason, BaseException):
        return f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__
    return str(reason)


def download_error(subset: Subset, cause: str) -> DownloadFailed:
    """The one error a failed download becomes: the file, the URL, the cause, and how to work offline (a command
    that reads a data file of its own adds that way: `DownloadFailed.offering`).

    Worded as `hub.hub_error` words the Hugging Face download, so every subset fails alike.
    """
    return DownloadFailed(
        f"could not download {subset.filename} (HealthBench {subset.name}) from {subset.url}: {cause}",
        (offline_way(subset.filename),),
    )


def offline_way(filename: str) -> str:
    """The way to work offline that every command has."""
    return f"set {DATA_DIR_ENV} to a folder holding {filename}"


# Network failures: OSError covers refused connections, DNS failures, resets and timeouts (URLError is
# one); HTTPException a server that does not speak HTTP.
_NETWORK_ERRORS = (OSError, http.client.HTTPException)


def _open(subset: Subset) -> http.client.HTTPResponse:
    try:
        response: http.client.HTTPResponse = urllib.request.urlopen(subset.url, timeout=TIMEOUT)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the error response open
        raise download_error(subset, _cause(exc)) from None
    except _NETWORK_ERRORS as exc:
        raise download_error(subset, _cause(exc)) from None
    return response


def _read(subset: Subset, response: http.client.HTTPResponse) -> bytes:
    try:
        return response.read(CHUNK)
    except _NETWORK_ERRORS as exc:
        raise download_error(subset, _cause(exc)) from None


def _download(subset: Subset, target: Path, transfer: Transfer) -> str:
    """Download to a temporary file beside `target`, hash while writing, then rename into place.

    Whatever fails (the network, the hash, an interrupt), the temporary file is removed, so nothing
    half-written is left in the cache.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out, _open(subset) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            received = 0
            with transfer(f"healthbench {subset.name}", total) as advance:
                while chunk := _read(subset, response):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    advance(len(chunk))
            # A read of a given size returns b"" when the connection ends early, even short of Content-Length.
            if total is not None and received < total:
                raise download_error(subset, f"the connection closed after {received:,} of {total:,} bytes")
        actual = digest.hexdigest()
        _check_hash(subset, subset.url, actual)
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return actual


def subset_path(name: str, transfer: Transfer = unseen) -> Path:
    """A checked local copy of the named subset's file, downloaded on first use (shown through `transfer`)."""
    if name == PROFESSIONAL:
        return professional_path()
    return _checked_file(_subset(name), transfer)[0]


def _subset(name: str) -> Subset:
    if name not in SUBSETS:
        raise DataError(f"unknown subset {name!r}; choose one of {', '.join(DOWNLOADABLE)}")
    return SUBSETS[name]


def _checked_file(subset: Subset, transfer: Transfer) -> tuple[Path, str]:
    """A checked local copy of an official file, and its sha256 (the official one unless a mismatch was allowed)."""
    path = data_dir_path(subset.filename)
    if path is not None:
        actual = file_sha256(path)
        _check_hash(subset, str(path), actual, yours=True)
        return path, actual
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
        return path, actual
    actual = _download(subset, path, transfer)
    write_atomic(sidecar, actual + "\n")
    return path, actual


def _check_count(name: str, expected: int, path: Path, count: int) -> None:
    if count != expected and not allowed(ROW_COUNT_ENV):
        raise DataError(
            f"{path}: {count} rows, the official {name} file has {expected}; set {ROW_COUNT_ENV}=1 to use it anyway"
        )


def _check_official_count(subset: Subset, path: Path, sha256: str, count: int) -> None:
    # A file accepted with another hash is not the official file: its row count is not the official one's either.
    if sha256 == subset.sha256:
        _check_count(subset.name, subset.rows, path, count)


def load_subset(name: str, transfer: Transfer = unseen) -> list[Row]:
    """Load a named task subset (one of `TASK_SUBSETS`), checked; a download is shown through `transfer`."""
    if name == "meta":
        raise DataError("subset 'meta' holds meta-evaluation rows; load it with load_meta_subset")
    if name == PROFESSIONAL:
        path = professional_path()
        rows = load_professional_rows(path)
        _check_count(name, PROFESSIONAL_ROWS, path, len(rows))
        return rows
    subset = _subset(name)
    path, sha256 = _checked_file(subset, transfer)
    rows = load_rows(path)
    _check_official_count(subset, path, sha256, len(rows))
    return rows


def load_meta_subset(transfer: Transfer = unseen) -> list[MetaRow]:
    """Load the meta-evaluation file, checked; a download is shown through `transfer`."""
    subset = SUBSETS["meta"]
    path, sha256 = _checked_file(subset, transfer)
    rows = load_meta_rows(path)
    _check_official_count(subset, path, sha256, len(rows))
    return rows
