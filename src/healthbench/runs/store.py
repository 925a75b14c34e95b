"""Durable progress of a run: an SQLite file in the output folder.

Each policy reply and each verdict is committed as it arrives (with the others of the same event-loop
iteration), so a process killed at any point loses only the calls that were in flight; running the same
command again asks for nothing already answered. Verdicts are keyed by the exact grader request, which
also makes re-grading an identical reply free. The run's configuration is stored once, and a different
one is refused rather than mixed in.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from healthbench.api.batch.records import BatchRecord
from healthbench.api.wire import Usage
from healthbench.errors import ConfigMismatch, OutputUnusable
from healthbench.files import disk_full
from healthbench.grading.verdict import Verdict

_SCHEMA = """
CREATE TABLE IF NOT EXISTS config (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    prompt_id TEXT NOT NULL, repeat INTEGER NOT NULL, response TEXT NOT NULL, usage TEXT NOT NULL,
    PRIMARY KEY (prompt_id, repeat)
);
CREATE TABLE IF NOT EXISTS verdicts (
    key TEXT PRIMARY KEY, criteria_met INTEGER NOT NULL, explanation TEXT NOT NULL, usage TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
    input_file_id TEXT PRIMARY KEY, batch_id TEXT, purpose TEXT NOT NULL, requests INTEGER NOT NULL,
    created REAL NOT NULL, open INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS batch_requests (
    custom_id TEXT PRIMARY KEY, input_file_id TEXT NOT NULL, attempts INTEGER NOT NULL
);
"""


def _usage(text: str) -> Usage:
    return Usage.from_dict(json.loads(text))


# Room kept on the store's disk for the last commit of a run whose disk fills up: a file of this size beside the
# store, removed when a commit finds no room, so the answers that arrived with it are kept all the same.
RESERVE_BYTES = 64 * 1024
# Pages (4 KiB) of write-ahead log between two checkpoints.
WAL_PAGES = 256
RESERVE_SUFFIX = ".reserve"


def _reserve(path: Path) -> Path | None:
    """The reserve file at `path`, made if the disk has room for it (None if it has not)."""
    try:
        with path.open("wb") as handle:
            handle.write(b"\0" * RESERVE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError:
        path.unlink(missing_ok=True)
        return None
    return path


def _is_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the user's quota on it) is full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


class Store:
    """Samples and verdicts of one run folder.

    Inside an event loop, writes are committed together at the end of the loop iteration in which they
    arrived: one transaction for a wave of answers instead of one each, and nothing is kept waiting for
    longer than it takes the loop to come round. Without a running loop each write commits at once.
    """

    def __init__(self, path: Path) -> None:
        """Open (or make) the store at `path`; `OutputUnusable` for a folder that cannot be made or a file that
        is not a store."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # WAL: a committed write survives a killed process as soon as the commit returns.
            self._db = sqlite3.connect(path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # Every commit adds its pages to the log again, and the default checkpoint (4 MiB of log) let a run's
            # log grow to 4 MiB on a disk with less; a checkpoint each 1 MiB keeps it within that.
            self._db.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
            self._db.execute(f"PRAGMA journal_size_limit={WAL_PAGES * 4096}")
            self._db.executescript(_SCHEMA)
        except OSError as exc:
            raise OutputUnusable(exc.filename or path.parent, exc.strerror or str(exc)) from None
        except sqlite3.Error as exc:
            raise OutputUnusable(path, f"it is not a run's store, or cannot be one ({exc})") from None
        self.hits = 0
        self.path = path
        # Why the last commit failed (a full disk): set, the run stops; `on_failure` is told at once.
        self.failure: OutputUnusable | None = None
        self.on_failure: Callable[[], object] | None = None
        self._reserve = _reserve(path.with_name(path.name + RESERVE_SUFFIX))
        self._samples: dict[tuple[str, int], tuple[str, str]] = {}
        self._verdicts: dict[str, tuple[int, str, str]] = {}
        # The keys of the verdicts on disk, read once: a request not among them is not looked up (a fresh run's
        # every call), and one among them is read when it is asked for.
        self._stored = {key for (key,) in self._db.execute("SELECT key FROM verdicts")}
        self._flush_scheduled = False

    def close(self) -> None:
        """Write what is pending and close the database (a commit that fails is in `failure`)."""
        self.flush()
        self._db.close()
        if self._reserve is not None:
            self._reserve.unlink(missing_ok=True)

    def flush(self) -> None:
        """Commit pending writes in one transaction. A commit the disk has no room for is made again in the room
        the store's reserve held (so what arrived is kept), and the store's `failure` set: the run stops."""
        self._flush_scheduled = False
        if not self._samples and not self._verdicts:
            return
        try:
            self._commit()
        except (sqlite3.Error, OSError) as exc:
            self._rollback()
            self._failed(exc)  # said with the space left before the reserve is given up
            if self._reserve is not None and _is_full(exc):
                self._reserve.unlink(missing_ok=True)
                self._reserve = None
                try:
                    self._commit()
                except (sqlite3.Error, OSError):
                    self._rollback()  # still no room: these answers are asked again by the next session

    def _failed(self, exc: Exception) -> None:
        """Say the store cannot be written: `failure`, and `on_failure` told (once)."""
        if self.failure is not None:
            return
        if _is_full(exc):
            self.failure = disk_full(self.path.parent, self.path)
        else:
            self.failure = OutputUnusable(self.path, str(exc))
        if self.on_failure is not None:
            self.on_failure()

    def _rollback(self) -> None:
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # nothing was written, which is what a rollback is for
                self._db.execute("ROLLBACK")

    def _commit(self) -> None:
        """The pending writes in one transaction."""
        self._db.execute("BEGIN")
        if self._samples:
            self._db.executemany(
                "INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?)",
                [(pid, repeat, *value) for (pid, repeat), value in self._samples.items()],
            )
        if self._verdicts:
            self._db.executemany(
                "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?)",
                [(key, *value) for key, value in self._verdicts.items()],
            )
        self._db.execute("COMMIT")
        self._stored.update(self._verdicts)
        self._samples.clear()
        self._verdicts.clear()

    def _written(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            if self.failure is not None:
                raise self.failure from None
            return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self.flush)

    def bind_config(self, config: Mapping[str, Any], left_out: Mapping[str, str] | None = None) -> None:
        """Record the configuration of a new run, or refuse one that differs from what is recorded. `left_out`
        says what a key that a configuration leaves out stands for (its default), so that the refusal names it;
        a key it does not name is said to be unset."""
        stored = dict(self._db.execute("SELECT key, value FROM config").fetchall())
        wanted = {key: json.dumps(value, sort_keys=True) for key, value in config.items()}
        if not stored:
            # One transaction, not one per key: each commit adds its pages to the write-ahead log again.
            try:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT INTO config VALUES (?, ?)", wanted.items())
                self._db.execute("COMMIT")
            except (sqlite3.Error, OSError) as exc:
                self._rollback()
                self._failed(exc)
                assert self.failure is not None
                raise self.failure from None
            return
        changed = sorted(key for key in stored.keys() | wanted.keys() if stored.get(key) != wanted.get(key))
        if changed:
            unset = left_out or {}
            details = "; ".join(
                f"{key}: {stored.get(key, unset.get(key, '(unset)'))} -> {wanted.get(key, unset.get(key, '(unset)'))}"
                for key in changed
            )
            raise ConfigMismatch(details)

    def config(self) -> dict[str, Any]:
        """The recorded configuration."""
        return {key: json.loads(value) for key, value in self._db.execute("SELECT key, value FROM config")}

    def sample(self, prompt_id: str, repeat: int) -> tuple[str, Usage] | None:
        """A recorded policy reply and its usage."""
        pending = self._samples.get((prompt_id, repeat))
        if pending is not None:
            return pending[0], _usage(pending[1])
        row = self._db.execute(
            "SELECT response, usage FROM samples WHERE prompt_id = ? AND repeat = ?", (prompt_id, repeat)
        ).fetchone()
        return None if row is None else (row[0], _usage(row[1]))

    def put_sample(self, prompt_id: str, repeat: int, response: str, usage: Usage) -> None:
        """Record a policy reply."""
        self._samples[prompt_id, repeat] = (response, json.dumps(usage.as_dict()))
        self._written()

    def get_verdict(self, key: str) -> tuple[Verdict, Usage] | None:
        """A recorded verdict for an exact grader request, with what its call cost when it was made."""
        row = self._verdicts.get(key)
        if row is None and key in self._stored:
            query = "SELECT criteria_met, explanation, usage FROM verdicts WHERE key = ?"
            row = self._db.execute(query, (key,)).fetchone()
        if row is None:
            return None
        self.hits += 1
        return Verdict(bool(row[0]), row[1]), _usage(row[2])

    def put_verdict(self, key: str, verdict: Verdict, usage: Usage) -> None:
        """Record a verdict."""
        self._verdicts[key] = (int(verdict.criteria_met), verdict.explanation, json.dumps(usage.as_dict()))
        self._written()

    def spent(self) -> tuple[list[Usage], list[Usage]]:
        """Usage paid so far for policy replies and for verdicts, across every session of this run; each
        side as its live part and its batch part, which are priced apart."""
        self.flush()
        sides = []
        for table in ("samples", "verdicts"):
            live, batch = Usage(), Usage(batch=True)
            for (text,) in self._db.execute(f"SELECT usage FROM {table}"):
                usage = _usage(text)
                (batch if usage.batch else live).add(usage)
            sides.append([live, batch])
        return sides[0], sides[1]

    # The batch ledger: written and committed at once, since a batch id lost is a batch paid for twice.

    def record_upload(self, input_file_id: str, purpose: str, requests: Iterable[tuple[str, int]]) -> None:
        """An uploaded batch input file and the (custom_id, attempt number) of each request in it."""
        self.flush()
        rows = list(requests)
        self._db.execute("BEGIN")
        self._db.execute(
            "INSERT INTO batches (input_file_id, purpose, requests, created) VALUES (?, ?, ?, ?)",
            (input_file_id, purpose, len(rows), time.time()),
        )
        self._db.executemany(
            "INSERT OR REPLACE INTO batch_requests VALUES (?, ?, ?)",
            [(custom_id, input_file_id, attempts) for custom_id, attempts in rows],
        )
        self._db.execute("COMMIT")

    def record_batch_id(self, input_file_id: str, batch_id: str) -> None:
        """The batch created from an uploaded file."""
        self._db.execute("UPDATE batches SET batch_id = ? WHERE input_file_id = ?", (batch_id, input_file_id))

    def close_batch(self, input_file_id: str) -> None:
        """A batch whose results this run has taken in (or no longer needs)."""
        self._db.execute("UPDATE batches SET open = 0 WHERE input_file_id = ?", (input_file_id,))

    def open_batches(self) -> list[BatchRecord]:
        """Batches submitted by an earlier session and not yet taken in, oldest first."""
        rows = self._db.execute(
            "SELECT input_file_id, batch_id, purpose, requests, created FROM batches WHERE open = 1 ORDER BY created"
        )
        return [BatchRecord(*row) for row in rows]

    def batch_request(self, custom_id: str) -> tuple[str, int] | None:
        """The input file that last carried this request, and its attempt number there."""
        row = self._db.execute(
            "SELECT input_file_id, attempts FROM batch_requests WHERE custom_id = ?", (custom_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def batch_totals(self) -> tuple[int, int]:
        """Batches created and requests uploaded in them, over every session of this run."""
        row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(requests), 0) FROM batches").fetchone()
        return int(row[0]), int(row[1])
