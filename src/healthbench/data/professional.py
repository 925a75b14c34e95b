"""HealthBench Professional's file, from the Hugging Face dataset `openai/healthbench-professional` at a pinned
revision: `HEALTHBENCH_PROFESSIONAL_REVISION` when set, else the one its first download recorded, else `main` as
it was at that first download. No sha256 of it is published, so the first one seen is recorded beside it
(`healthbench_professional_eval.jsonl.json`: revision, sha256, when) and later files must match it.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from healthbench.data import hub
from healthbench.data.cache import OVERRIDE_ENV, allow_mismatch, cache_dir, data_dir_path, file_sha256
from healthbench.errors import DataError
from healthbench.files import write_atomic

PROFESSIONAL_DATASET = "openai/healthbench-professional"
PROFESSIONAL_FILENAME = "healthbench_professional_eval.jsonl"
REVISION_ENV = "HEALTHBENCH_PROFESSIONAL_REVISION"


class ProfessionalRecord(BaseModel):
    """What the first download of HealthBench Professional saw: the commit, its file's sha256, and when."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    revision: str
    requested: str
    sha256: str
    downloaded_at: str


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _read_record(path: Path) -> ProfessionalRecord | None:
    try:
        return ProfessionalRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValidationError as exc:
        raise DataError(
            f"{path}: not a download record ({exc.errors()[0]['msg']}); delete it to download again"
        ) from None


def _checked_cache(path: Path, record: ProfessionalRecord) -> Path:
    actual = file_sha256(path)
    if actual != record.sha256 and not allow_mismatch():
        raise DataError(
            f"{path}: changed since it was downloaded (sha256 {actual}, recorded {record.sha256} in "
            f"{_record_path(path)}); delete the file to download revision {record.revision} again, or set "
            f"{OVERRIDE_ENV}=1 to use it anyway"
        )
    return path


def professional_path() -> Path:
    """A local copy of HealthBench Professional, from `HEALTHBENCH_DATA_DIR`, the cache, or the Hub.

    A cached copy is used without asking the Hub when it matches its record (and the revision asked for, if
    `HEALTHBENCH_PROFESSIONAL_REVISION` is set). Otherwise the file is downloaded at the pinned revision and
    must hash to the recorded sha256; the first download records both. `HEALTHBENCH_ALLOW_SHA256_MISMATCH=1`
    uses a file that does not match, without recording it. Its row count is checked when it is loaded.
    """
    path = data_dir_path(PROFESSIONAL_FILENAME)
    if path is not None:
        return path  # no published hash to check it against
    path = cache_dir() / PROFESSIONAL_FILENAME
    record_path = _record_path(path)
    record = _read_record(record_path)
    wanted = os.environ.get(REVISION_ENV) or None
    if record is not None and path.is_file() and wanted in (None, record.revision, record.requested):
        return _checked_cache(path, record)
    requested = wanted or (record.revision if record is not None else "main")
    commit = hub.resolve_commit(PROFESSIONAL_DATASET, PROFESSIONAL_FILENAME, requested)
    if record is not None and path.is_file() and commit == record.revision:
        return _checked_cache(path, record)  # another name for the recorded commit: nothing to download
    with hub.downloaded(PROFESSIONAL_DATASET, PROFESSIONAL_FILENAME, commit, path.parent) as fetched:
        actual = file_sha256(fetched)
        if record is not None and actual != record.sha256 and not allow_mismatch():
            raise DataError(
                f"{PROFESSIONAL_DATASET} {PROFESSIONAL_FILENAME} at revision {commit} has sha256 {actual}, but "
                f"the file first downloaded (revision {record.revision}, {record.downloaded_at}) had "
                f"{record.sha256}: the file changed. To accept the new file, delete {record_path} and load "
                f"again; to use it without recording it, set {OVERRIDE_ENV}=1."
            )
        os.replace(fetched, path)
    if record is None:
        record = ProfessionalRecord(
            revision=commit, requested=requested, sha256=actual, downloaded_at=datetime.now(UTC).isoformat()
        )
        write_atomic(record_path, record.model_dump_json(indent=2) + "\n")
    return path
