"""One dataset file from the Hugging Face Hub: its pinned commit, an atomic download, errors a user can act on.

huggingface_hub reads `HF_ENDPOINT` once, when it is imported; here it is read at each call and passed
explicitly, so a mirror set later (or a test's loopback fake) is the one asked. `HF_TOKEN` is read at each
call too; without it huggingface_hub falls back to the token of `hf auth login`. The token is never put in a
message. huggingface_hub itself is imported only when something is downloaded: it costs a fifth of a second.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from healthbench.errors import DataError, DownloadFailed, MissingExtra

DEFAULT_ENDPOINT = "https://huggingface.co"
# Seconds to wait on each connection for the metadata request; the body's reads use huggingface_hub's own
# timeout (HF_HUB_DOWNLOAD_TIMEOUT, 10 s by default).
TIMEOUT = 30.0


def endpoint() -> str:
    """The Hub endpoint: `HF_ENDPOINT` as it is now, else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def file_url(repo_id: str, filename: str, revision: str) -> str:
    """Where a dataset file is resolved on the Hub at `revision`."""
    return f"{endpoint()}/datasets/{repo_id}/resolve/{quote(revision, safe='')}/{quote(filename)}"


def _status(exc: BaseException) -> tuple[int, str | None] | None:
    """The HTTP status (and the Hub's X-Error-Code) behind an error, looking through its causes.

    Read from the error's `response`, which huggingface_hub's HTTP errors carry in every version (its
    error classes moved between modules, and its HTTP library changed from requests to httpx).
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        response: Any = getattr(current, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            return status, response.headers.get("X-Error-Code")
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _cause(exc: BaseException) -> str:
    """The innermost error's type and first line: what actually went wrong (refused, timed out, DNS)."""
    innermost = exc
    while innermost.__cause__ is not None and innermost.__cause__ is not exc:
        innermost = innermost.__cause__
    text = str(innermost).strip().splitlines()
    return f"{type(innermost).__name__}: {text[0]}" if text else type(innermost).__name__


def hub_error(repo_id: str, filename: str, url: str, exc: BaseException) -> DataError:
    """The one error a failed Hub request becomes: access refused, or unreachable and how to work offline (a
    `DownloadFailed`, to which a command that reads a data file of its own adds that way)."""
    status = _status(exc)
    if status is not None and status[0] in (401, 403):
        return DataError(
            f"access to the Hugging Face dataset {repo_id} was refused (HTTP {status[0]}): it is gated or private. "
            f"Accept its terms on https://huggingface.co/datasets/{repo_id} while logged in, then set HF_TOKEN to "
            "an access token of that account (https://huggingface.co/settings/tokens)."
        )
    cause = _cause(exc) if status is None else f"HTTP {status[0]}" + (f" ({status[1]})" if status[1] else "")
    return DownloadFailed(
        f"could not download {filename} of the Hugging Face dataset {repo_id} from {url}: {cause}",
        (f"set HEALTHBENCH_DATA_DIR to a folder holding {filename}",),
    )


def _hub_failures() -> tuple[type[Exception], ...]:
    """What huggingface_hub raises when a request fails: its own errors and requests' (OSError, in every
    version), a repo id or revision it refuses (ValueError), and the transport errors of httpx or httpx2, which
    its later versions use and which are no OSError. Every one is the same user-facing problem, its cause named."""
    kinds: list[type[Exception]] = [OSError, ValueError]
    for transport in ("httpx2", "httpx"):
        try:
            kinds.append(importlib.import_module(transport).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(kinds)


def resolve_commit(repo_id: str, filename: str, revision: str) -> str:
    """The commit sha that `revision` (a branch, tag or sha) names, from the file's metadata: one HEAD request.

    It fails fast, without huggingface_hub's retries, and with the access or network message of `hub_error`.
    """
    MissingExtra.check("huggingface_hub", "HealthBench Professional's download", "hub")
    from huggingface_hub import get_hf_file_metadata

    url = file_url(repo_id, filename, revision)
    try:
        metadata = get_hf_file_metadata(url, token=_token(), timeout=TIMEOUT)
    except _hub_failures() as exc:
        raise hub_error(repo_id, filename, url, exc) from None
    if not metadata.commit_hash:
        raise DataError(
            f"{url} answered without an X-Repo-Commit header, so it is not a Hugging Face Hub endpoint; "
            "check HF_ENDPOINT and any proxy"
        )
    return metadata.commit_hash


@contextmanager
def downloaded(repo_id: str, filename: str, commit: str, folder: Path) -> Iterator[Path]:
    """Download a dataset file at `commit` into a fresh temporary folder inside `folder`, yielding its path.

    The caller checks the file and moves it into place inside the `with` block; whatever happens, the
    temporary folder (huggingface_hub's partial files and metadata with it) is gone afterwards, so a failed
    download leaves nothing half-written. huggingface_hub's own cache is not used, so the file is not
    stored twice.
    """
    MissingExtra.check("huggingface_hub", "HealthBench Professional's download", "hub")
    from huggingface_hub import hf_hub_download

    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder, prefix=".hub-", suffix=".part"))
    try:
        try:
            local = hf_hub_download(
                repo_id=repo_id,
                repo_type="dataset",
                filename=filename,
                revision=commit,
                endpoint=endpoint(),
                token=_token(),
                local_dir=staging / "files",
                cache_dir=staging / "cache",
                etag_timeout=TIMEOUT,
            )
        except _hub_failures() as exc:
            raise hub_error(repo_id, filename, file_url(repo_id, filename, commit), exc) from None
        yield Path(local)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
