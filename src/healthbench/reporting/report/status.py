"""Where a run stands, as its page says it: how many samples of how many tasks and repeats are graded, whether
the run is finished, and, when it is not, what is missing and why (from failures.jsonl).

A run is finished when metrics.json has a score and run.json counts no failed or deferred sample; anything
else gets a banner saying what is missing, and the failures of the last session are listed by cause and by
sample.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from healthbench.runs.records import FailureRecord, MetaRecord, Metrics, RunRecord, SampleRecord

# Failed samples listed one by one, at most; failures.jsonl holds them all.
MAX_LISTED = 1000


@dataclass(frozen=True)
class Counts:
    """Samples graded (lines of results.jsonl), of how many tasks and repeats, against what run.json planned.

    `planned`, `failed` and `deferred` are run.json's `samples`, `failed` and `deferred` (None when run.json
    does not say); `reference` is True for a baseline of reference completions, whose repeats are the
    completions of a task.
    """

    samples: int
    tasks: int
    repeats: int
    planned: int | None
    failed: int
    deferred: int
    reference: bool = False

    @property
    def unreached(self) -> int:
        """Planned samples neither graded, failed nor deferred: the session stopped before it got to them."""
        if self.planned is None:
            return 0
        return max(0, self.planned - self.samples - self.failed - self.deferred)

    @property
    def graded(self) -> str:
        """What was graded: "200 samples graded: 100 tasks, 2 repeats each", "100 tasks graded", or, for a
        run not finished, "171 of 200 samples graded (100 tasks, 2 repeats each)"."""
        per = "reference completions" if self.reference else "repeats"
        planned = self.planned if self.planned != self.samples else None
        if self.repeats <= 1:
            of = "" if planned is None else f" of {planned:,}"
            return f"{self.samples:,}{of} task{'s' * (self.samples != 1 or bool(of))} graded"
        if planned is not None:
            tasks = planned // self.repeats if planned % self.repeats == 0 else None
            shape = f" ({tasks:,} tasks, {self.repeats} {per} each)" if tasks else ""
            return f"{self.samples:,} of {planned:,} samples graded{shape}"
        if self.samples == self.tasks * self.repeats:
            return f"{self.samples:,} samples graded: {self.tasks:,} tasks, {self.repeats} {per} each"
        return f"{self.samples:,} samples graded, of {self.tasks:,} tasks (up to {self.repeats} {per} each)"

    def repeat(self, index: int | None) -> str:
        """A sample's repeat as a reader counts it: "repeat 1 of 2"; "" for a run without repeats."""
        if index is None or self.repeats <= 1:
            return ""
        return f"{'reference completion' if self.reference else 'repeat'} {index + 1} of {self.repeats}"


def _repeat(record: SampleRecord | MetaRecord) -> int:
    return record.repeat if isinstance(record, SampleRecord) else 0


def counts(run: RunRecord | None, results: Sequence[SampleRecord | MetaRecord]) -> Counts:
    """The counts of a run from its run.json and results.jsonl records."""
    repeats = [_repeat(record) for record in results]
    spec = run.spec if run is not None else None
    n_repeats = spec.n_repeats if spec is not None else 1
    return Counts(
        samples=len(results),
        tasks=len({record.prompt_id for record in results}),
        repeats=max(n_repeats, max(repeats, default=0) + 1),
        planned=None if run is None else run.stats.samples,
        failed=0 if run is None else run.stats.failed,
        deferred=0 if run is None else run.stats.deferred,
        reference=spec is not None and spec.baseline is not None and spec.baseline.references,
    )


@dataclass(frozen=True)
class Failure:
    """One failed sample as listed: task, repeat (as words), rubric item and cause."""

    task: str
    repeat: str
    criterion: str
    cause: str


@dataclass(frozen=True)
class Status:
    """What the page says of the run's state: `finished`, the banner's lines when it is not, and the failures
    of the last session (grouped by cause, then listed)."""

    finished: bool
    problems: list[str]
    causes: list[tuple[str, int]]
    failures: list[Failure]
    unlisted: int


def status(
    run: RunRecord | None,
    metrics: Metrics | None,
    results: Sequence[SampleRecord | MetaRecord],
    tally: Counts,
    failures: Sequence[FailureRecord],
    *,
    unit: str = "samples",
) -> Status:
    """Whether the run is finished and, when it is not, what is missing: failed samples (from failures.jsonl),
    samples waiting on batches, samples the session never reached."""

    def many(n: int) -> str:
        return f"{n:,} {unit if n != 1 else unit.removesuffix('s')}"

    problems = []
    if run is None:
        problems.append(
            f"run.json is missing: the run's first session did not end (it was killed or interrupted); "
            f"{many(tally.samples)} graded before it stopped"
        )
    elif tally.planned is not None:
        problems.append(f"{tally.samples:,} of {many(tally.planned)} graded")
    if tally.failed:
        problems.append(f"{many(tally.failed)} could not be graded: see Failures below for which and why")
    if tally.deferred:
        problems.append(f"{many(tally.deferred)} still waiting on batches")
    if tally.unreached:
        problems.append(f"{many(tally.unreached)} not reached: the last session stopped before")
    if not metrics:
        problems.append(f"metrics.json is missing: a run writes it only once every {unit.removesuffix('s')} is graded")
    finished = bool(metrics) and not (tally.failed or tally.deferred or tally.unreached)
    # A failure of an earlier session whose sample a later one graded (before it was killed) is stale.
    done = {(record.prompt_id, _repeat(record)) for record in results}
    ordered = sorted(failures, key=lambda f: (f.prompt_id or "", f.repeat or 0))
    listed = [
        Failure(
            task=f.prompt_id or "",
            repeat=tally.repeat(f.repeat),
            criterion=f.criterion or "",
            cause=f.cause or f.error,
        )
        for f in ordered
        if f.repeat is None or (f.prompt_id or "", f.repeat) not in done
    ]
    causes = Counter(failure.cause for failure in listed).most_common()
    return Status(finished, [] if finished else problems, causes, listed[:MAX_LISTED], max(0, len(listed) - MAX_LISTED))


def unfinished(run: RunRecord | None, results: Sequence[SampleRecord | MetaRecord]) -> str | None:
    """What keeps a run from being scored, in words ("29 samples could not be graded"), or None when every
    sample it planned is graded. A folder without run.json is a first session that never ended."""
    if run is None:
        return "run.json is missing: its first session did not end"
    tally = counts(run, results)
    missing = [
        f"{n:,} sample{'s' * (n != 1)} {why}"
        for n, why in (
            (tally.failed, "could not be graded"),
            (tally.deferred, "still waiting on batches"),
            (tally.unreached, "not reached"),
        )
        if n
    ]
    return "; ".join(missing) or None
