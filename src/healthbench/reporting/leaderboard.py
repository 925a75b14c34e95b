"""Several finished runs side by side: each run's headline with its 95% interval, per theme and axis (per
slice for HealthBench Professional), ranked by headline, with the runs whose grader or configuration differ
from the others marked, so a table never silently sets unlike scores against each other.

Everything comes from what the runs already wrote: metrics.json (the figures), results.jsonl (the tasks graded,
for the interval and the task set), run.json (what was graded, by which grader, called how often, on which data
and split, how the headline was scored) and usage.json (what it cost, and what its grader's prompt cache saved).
A run graded per reply is marked in every row: its score is never HealthBench's. The headline is metrics.json
`score`, which a run with a length adjustment writes as the length-adjusted score; its interval is a percentile
bootstrap over the run's tasks (each task's repeats averaged, as `compare` takes them), since repeats of a task
are not evidence about other tasks: 3 tasks graded 10 times are 3 tasks, not 30.

Runs on different task sets (another subset or data file, limit, split, or simply other tasks graded) are not
comparable: each task set's runs are ranked among themselves, and a run on a task set other than most runs'
is marked. Runs whose scores are equal to the three decimals shown share a rank, and the next rank is skipped
(1, 1, 3). The data is named by its subset, or by its file's name and the start of its sha256, so two copies of
one file are the same data and two files of one name are not.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healthbench.data import tags
from healthbench.errors import DataError
from healthbench.grading.bootstrap import N_BOOTSTRAP, percentile_interval, resample_means
from healthbench.grading.scoring import LENGTH_ADJUSTED
from healthbench.reporting.compare import task_headlines
from healthbench.reporting.report.charts import interval
from healthbench.runs.folder import METRICS, RESULTS, RunFolder
from healthbench.runs.outputs import FigureRecord, Leaderboard, LeaderboardRow, MarkRecord
from healthbench.runs.records import UsageRecord
from healthbench.runs.spec import SIDE_RUNS, GraderRequest, LengthSpec, RunSpec


@dataclass(frozen=True)
class Figure:
    """One clipped mean of metrics.json with its bootstrap std and sample count, and its 95% interval: the one
    given (the headline's, tasks resampled), else score ± 1.96 std clipped to [0, 1]."""

    value: float
    std: float | None
    n: int | None
    interval: tuple[float, float] | None = None

    @property
    def low_high(self) -> tuple[float, float] | None:
        """The 95% interval; None when neither it nor the std is recorded."""
        if self.interval is not None:
            return self.interval
        return None if self.std is None else interval(self.value, self.std)

    def record(self) -> FigureRecord:
        """The figure as --json prints it."""
        low, high = self.low_high or (None, None)
        return FigureRecord(value=self.value, bootstrap_std=self.std, n_samples=self.n, ci_low=low, ci_high=high)


@dataclass(frozen=True)
class TaskSet:
    """The tasks a run graded: where they come from (`words`: data, split, limit, count) and which they are
    (`digest` of their ids and the data's sha256), so two runs are comparable exactly when their digests are
    equal."""

    words: str
    digest: str
    n: int


@dataclass(frozen=True)
class Cost:
    """What a run cost (the whole run, every session), and its grader's prompt cache: the share of prompt tokens
    read from it and what that took off the cost (None where not recorded, or the model has no price)."""

    usd: float | None
    cache_hit_rate: float | None = None
    cache_saved_usd: float | None = None

    def describe(self) -> str:
        """As the table shows it: "$12.34 (grader cache 18%, $1.20 saved)"."""
        cost = "no price" if self.usd is None else f"${self.usd:,.2f}"
        if self.cache_hit_rate is None:
            return cost
        saved = "" if self.cache_saved_usd is None else f", ${self.cache_saved_usd:,.2f} saved"
        return f"{cost} (grader cache {self.cache_hit_rate:.0%}{saved})"


@dataclass
class Entry:
    """One run as the leaderboard shows it: its folder, what its run.json says it was asked to do (`spec`: what was
    graded, by which grader, on which data and split), whether its headline is length-adjusted, its headline and
    slices, the tasks it graded, what it cost, and the marks the board gives it."""

    run: str
    spec: RunSpec
    adjusted: bool
    headline: Figure
    metrics: dict[str, Figure]
    tasks: TaskSet
    cost: Cost = field(default_factory=lambda: Cost(None))
    marks: list[MarkRecord] = field(default_factory=list)

    @property
    def grader(self) -> str:
        """The grader model, with its API and reasoning effort when run.json records them, and `per-reply` when it
        was called once per reply (never the official grading)."""
        grader = self.spec.grader
        how = [] if grader.request is None else [grader.request.api]
        if grader.request is not None and grader.request.reasoning_effort:
            how.append(f"effort {grader.request.reasoning_effort}")
        if grader.calls != "per-item":
            how.append(grader.calls)
        return f"{grader.model} ({', '.join(how)})" if how else grader.model

    @property
    def subset(self) -> str:
        """The data as a reader knows it (`data_label`), and the split when one was graded ("full, split
        heldout")."""
        data = self.spec.data
        name = data_label(data.source, data.sha256)
        return name if data.split is None else f"{name}, split {data.split}"

    @property
    def length_adjustment(self) -> LengthSpec | None:
        """The settings of the length adjustment its headline is scored with (None: not adjusted, or not
        recorded)."""
        return self.spec.length_adjustment if self.adjusted else None

    @property
    def headline_kind(self) -> str:
        """What the headline is: the score, or the length-adjusted score with its settings."""
        if not self.adjusted:
            return "score"
        if self.length_adjustment is None:
            return "length-adjusted score (settings not recorded)"
        return f"length-adjusted score ({self.length_adjustment.adjustment.describe()})"

    @property
    def official(self) -> bool | None:
        """Whether the run is in HealthBench Professional's official configuration (None: it has none)."""
        return None if self.spec.official is None else self.spec.official.configuration

    @property
    def official_differences(self) -> list[str]:
        """How it differs from the official configuration, a sentence each."""
        return [] if self.spec.official is None else [str(d) for d in self.spec.official.differences]

    def row(self, rank: int) -> LeaderboardRow:
        """The run as the board records it; its headline's std, interval and samples as its slices' are."""
        spec = self.spec
        return LeaderboardRow(
            rank=rank,
            run=self.run,
            command=spec.command,
            model=spec.subject,
            grader_model=spec.grader.model,
            grader_request=spec.grader.request,
            grader_calls=spec.grader.calls,
            grader=self.grader,
            subset=self.subset,
            data=spec.data.source,
            data_sha256=spec.data.sha256,
            split=spec.data.split,
            task_set=self.tasks.words,
            n_tasks=self.tasks.n,
            headline=self.headline_kind,
            length_adjustment=self.length_adjustment,
            score=self.headline.value,
            **self.headline.record().model_dump(exclude={"value"}),
            official_configuration=self.official,
            official_differences=self.official_differences,
            cost_usd=self.cost.usd,
            grader_cache_hit_rate=self.cost.cache_hit_rate,
            grader_cache_saved_usd=self.cost.cache_saved_usd,
            cost=self.cost.describe(),
            marks=list(self.marks),
            metrics={name: figure.record() for name, figure in self.metrics.items()},
        )


def data_label(source: str, sha256: str | None) -> str:
    """The data as a reader knows it: the official subset's name ("hard"), or the file's name and the start of its
    sha256 ("rows.jsonl sha256:648ba52f3f84"; the name alone when run.json does not record the hash)."""
    if source.startswith("subset:"):
        return source.removeprefix("subset:")
    name = Path(source).name
    return f"{name} sha256:{sha256[:12]}" if sha256 else name


def _figure(metrics: Mapping[str, Any], name: str, given: tuple[float, float] | None = None) -> Figure:
    std, n = metrics.get(f"{name}:bootstrap_std"), metrics.get(f"{name}:n_samples")
    return Figure(float(metrics[name]), None if std is None else float(std), None if n is None else int(n), given)


def _task_interval(headlines: Mapping[str, float], seed: int) -> tuple[float, float] | None:
    """The 95% percentile interval of the clipped mean headline, tasks resampled (in id order, as `compare`)."""
    import numpy as np  # deferred: numpy costs 0.2 s of CLI start-up

    means = resample_means([headlines[task] for task in sorted(headlines)], seed=seed, n_bootstrap=N_BOOTSTRAP)
    return percentile_interval(np.clip(means, 0.0, 1.0))


def _task_set(spec: RunSpec, subset: str, tasks: Sequence[str]) -> TaskSet:
    """The run's task set: its data as the board names it, its split and limit when it had them, its tasks."""
    split = spec.data.split
    words = [subset] + ([f"split {split}"] if split else []) + ([f"limit {spec.limit}"] if spec.limit else [])
    ids = "\n".join([spec.data.sha256 or spec.data.source, *sorted(tasks)])
    n = len(tasks)
    return TaskSet(f"{', '.join(words)}: {n} task{'s' * (n != 1)}", hashlib.sha256(ids.encode()).hexdigest(), n)


def load_entry(folder: Path) -> Entry:
    """One finished run from its folder; a folder that is not one (no metrics.json or run.json, samples
    not graded, a meta-eval) is a DataError naming it."""
    run = RunFolder(folder).require_run()
    spec = run.spec
    if spec.command == "meta-eval":
        raise DataError(
            f"{folder}: a meta-eval run measures a grader against physicians, not a model, so it has no place "
            "on a leaderboard of models (its report.html shows the grader's agreement)"
        )
    if spec.command == "probe":
        raise DataError(
            f"{folder}: a probe measures how hackable a grader is, not a model, so it has no place on a leaderboard "
            "of models (its probe.html shows the gains)"
        )
    if spec.command in SIDE_RUNS:
        raise DataError(f"{folder}: {SIDE_RUNS[spec.command]}, not a model's run, so it has no place on a leaderboard")
    for count, why in ((run.stats.failed, "could not be graded"), (run.stats.deferred, "waiting on batches")):
        if count:
            raise DataError(
                f"{folder}: not a finished run ({count} sample{'s' if count != 1 else ''} {why}); finish the run first"
            )
    metrics = RunFolder(folder).require_metrics()
    if "score" not in metrics:
        raise DataError(f"{folder / METRICS}: no score")
    results = RunFolder(folder).read_results()
    if not results:
        raise DataError(f"{folder / RESULTS}: no results (is the run finished?)")
    headlines = task_headlines(results, run, str(folder))
    families = tuple(f"{name}:" for name in tags.BREAKDOWN_FAMILIES)
    names = [n for n in metrics if n.startswith(families) and not n.endswith((":n_samples", ":bootstrap_std"))]
    usage = RunFolder(folder).read(UsageRecord)
    grader = usage.whole_run.grader if usage is not None else None
    cost = Cost(
        usage.whole_run.cost_usd if usage is not None else run.stats.cost_usd,
        None if grader is None else grader.cache_hit_rate,
        None if grader is None else grader.cache_saved_usd,
    )
    return Entry(
        run=str(folder),
        spec=spec,
        adjusted=LENGTH_ADJUSTED in metrics,
        headline=_figure(metrics, "score", _task_interval(headlines, spec.seed)),
        metrics={name: _figure(metrics, name) for name in sorted(names, key=_order)},
        tasks=_task_set(spec, data_label(spec.data.source, spec.data.sha256), list(headlines)),
        cost=cost,
    )


def _order(name: str) -> tuple[int, str]:
    return tags.BREAKDOWN_FAMILIES.index(tags.family(name)), name


def _request_words(request: GraderRequest | None) -> str:
    """How the grader was asked, in words; unset fields and `reasoning` (implied by the effort) left out."""
    if request is None:
        return "request settings not recorded"
    shown = {k.replace("_", " "): v if isinstance(v, str) else json.dumps(v) for k, v in request.model_dump().items()}
    return ", ".join(f"{k} {v}" for k, v in shown.items() if k != "reasoning" and v != "null")


def _differences(entries: Sequence[Entry]) -> list[str]:
    """Mark each run whose setting is not the one most runs share (every run, when none is), and return a
    sentence per setting that differs across runs."""
    settings: list[tuple[str, Callable[[Entry], str]]] = [
        ("grader model", lambda e: e.spec.grader.model),
        ("grader request", lambda e: _request_words(e.spec.grader.request)),
        ("data", lambda e: e.subset),
        ("length adjustment", lambda e: e.headline_kind),
    ]
    sentences = []
    for kind, key in settings:
        counts = Counter(key(entry) for entry in entries)
        if len(counts) < 2:
            continue
        (common, most), (_, second) = counts.most_common(2)
        sentences.append(
            f"{kind} differs: " + "; ".join(f"{v} ({n} run{'s' * (n > 1)})" for v, n in counts.most_common())
        )
        for entry in entries:
            value = key(entry)
            if most > second and value == common:
                continue
            others = sorted(v for v in counts if v != value)
            entry.marks.append(MarkRecord(kind=kind, detail=f"{value} (other runs: {'; '.join(others)})"))
    sets = Counter(entry.tasks.digest for entry in entries)
    if len(sets) > 1:
        words = {entry.tasks.digest: entry.tasks.words for entry in entries}
        sentences.append(
            "task sets differ: "
            + "; ".join(f"{words[digest]} ({n} run{'s' * (n > 1)})" for digest, n in sets.most_common())
            + ". Runs on different tasks are not comparable: each task set's runs are ranked among themselves"
        )
        (common, most), (_, second) = sets.most_common(2)
        for entry in entries:
            if most > second and entry.tasks.digest == common:
                continue
            others = sorted({words[d] for d in sets if d != entry.tasks.digest})
            detail = f"ranked apart: its tasks ({entry.tasks.words}) are not those of other runs ({'; '.join(others)})"
            entry.marks.append(MarkRecord(kind="not comparable", detail=detail))
    calls = Counter(entry.spec.grader.calls for entry in entries)
    if set(calls) != {"per-item"}:
        sentences.append(
            "grader calls: "
            + "; ".join(f"{v} ({n} run{'s' * (n > 1)})" for v, n in calls.most_common())
            + ". A run graded per reply is not HealthBench's official grading, and its score is not comparable"
        )
    for entry in entries:
        # Every such row is marked, whatever the other runs are: its score is never the official one.
        if entry.spec.grader.calls != "per-item":
            detail = "one grader call for all of a reply's rubric items, not one per item: not the official grading"
            entry.marks.append(MarkRecord(kind=entry.spec.grader.calls, detail=detail))
        if entry.official is False:
            differences = "; ".join(entry.official_differences or ["differences not recorded"])
            detail = f"not HealthBench Professional's official configuration: {differences}"
            entry.marks.append(MarkRecord(kind="not official", detail=detail))
    return sentences


def _ranks(entries: Sequence[Entry]) -> list[int]:
    """Competition ranks of entries sorted best first: a score equal to the one above, as shown (three
    decimals), shares its rank, and the ranks it takes up are skipped (1, 1, 3)."""
    ranks: list[int] = []
    for i, entry in enumerate(entries):
        tied = i > 0 and f"{entry.headline.value:.3f}" == f"{entries[i - 1].headline.value:.3f}"
        ranks.append(ranks[-1] if tied else i + 1)
    return ranks


def build(folders: Sequence[Path]) -> Leaderboard:
    """The leaderboard of `folders`: the runs of each task set together, ranked among themselves by headline
    score (highest first, ties by run; equal shown scores share a rank), the task sets in the order of their best
    runs; the slice names per family over all runs, and a sentence per setting that differs across runs."""
    seen: dict[Path, Path] = {}
    for folder in folders:
        resolved = folder.resolve()
        if resolved in seen:
            raise DataError(f"{folder}: given twice (as {seen[resolved]})")
        seen[resolved] = folder
    best_first = sorted((load_entry(folder) for folder in folders), key=lambda e: (-e.headline.value, e.run))
    groups: dict[str, list[Entry]] = {}
    for entry in best_first:
        groups.setdefault(entry.tasks.digest, []).append(entry)
    differences = _differences(best_first)
    families: dict[str, list[str]] = {}
    for name in sorted({name for entry in best_first for name in entry.metrics}, key=_order):
        families.setdefault(name.split(":", 1)[0], []).append(name)
    rows = [entry.row(rank) for group in groups.values() for rank, entry in zip(_ranks(group), group, strict=True)]
    return Leaderboard(runs=rows, families=families, differences=differences)
