"""Several graders' meta-evaluations of the same rows, made into one `JudgesRecord`: each grader's agreement with
physicians (macro F1 overall and per category, with seeded bootstrap intervals over completions, as
`metamodes` draws them), what it cost per 1,000 rewards, how long its requests took, what failed, and whether the
rows are enough to tell the leader from the others (the paired difference's interval leaves out zero); then how
often each trick fools each grader, from its trials (`runs.hackability`) beside its meta-eval's verdicts on the
untouched completions (`grading.hackability`), the attacker's rewrites, and the graders no other beats on both
axes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from healthbench.grading.agreement import MODEL_F1, PHYSICIAN_F1, macro_f1_resamples
from healthbench.grading.bootstrap import CONFIDENCE, N_BOOTSTRAP, percentile_interval
from healthbench.grading.hackability import fooling, judge_verdict, pareto_front, worst
from healthbench.reporting.metamodes import cluster_of
from healthbench.runs.folder import RunFolder
from healthbench.runs.hackability import HACK_FOLDER
from healthbench.runs.judges import (
    ITEMS_PER_REWARD,
    AttackerEntry,
    CategoryAgreement,
    Difference,
    JudgeCost,
    JudgeEntry,
    JudgeHackability,
    JudgeLatency,
    JudgesRecord,
    TrickFigures,
)
from healthbench.runs.records import MetaRecord, SideUsage, UsageRecord

# What a grader's cost keeps of its side of usage.json as it is there: every field the two share by name (its calls,
# tokens and cost over the whole run).
_RUN_COST = set(SideUsage.model_fields) & set(JudgeCost.model_fields)


@dataclass(frozen=True)
class Judge:
    """One grader in one call mode, as the command was given it, and the folder of its meta-eval run (`place`:
    that folder's path under the judges' folder, as judges.json names it), with its trials inside; what stopped
    either when its endpoint could not be used."""

    name: str
    model: str
    base_url: str
    calls: Literal["per-item", "per-reply"]
    folder: RunFolder
    place: str
    failure: str | None = None
    hack_failure: str | None = None

    @property
    def hack(self) -> RunFolder:
        """The folder of its trials."""
        return RunFolder(self.folder / HACK_FOLDER)


def _resampled(records: Sequence[Sequence[MetaRecord]], seed: int, n_bootstrap: int) -> Any:
    """Macro F1 resamples (resamples x raters) of each run's verdicts on the first run's rows and labels."""
    rows = records[0]
    verdicts = [[row.criteria_met for row in run] for run in records]
    labels, clusters = [row.binary_labels for row in rows], [cluster_of(row) for row in rows]
    return macro_f1_resamples(verdicts, labels, clusters, seed=seed, n_bootstrap=n_bootstrap)


def _categories(
    records: Sequence[MetaRecord], metrics: dict[str, float | int], seed: int, n_bootstrap: int
) -> list[CategoryAgreement]:
    by_category: dict[str, list[MetaRecord]] = {}
    for record in records:
        by_category.setdefault(record.category, []).append(record)
    out = []
    for category, rows in sorted(by_category.items()):
        model, physicians = metrics.get(f"{category}: {MODEL_F1}"), metrics.get(f"{category}: {PHYSICIAN_F1}")
        out.append(
            CategoryAgreement(
                category=category,
                rows=len(rows),
                macro_f1=None if model is None else float(model),
                interval=percentile_interval(_resampled([rows], seed, n_bootstrap)[:, 0]),
                physicians_f1=None if physicians is None else float(physicians),
            )
        )
    return out


def _cost(folder: RunFolder, records: Sequence[MetaRecord]) -> JudgeCost | None:
    usage = folder.read(UsageRecord)
    side = usage.whole_run.grader if usage is not None else None
    if side is None or not records:
        return None
    per_reward = 1000 * ITEMS_PER_REWARD / len(records)  # rewards' worth of verdicts, per verdict graded
    return JudgeCost(
        verdicts=len(records),
        **side.model_dump(include=_RUN_COST),
        prompt_tokens_per_1000_rewards=side.prompt_tokens * per_reward,
        completion_tokens_per_1000_rewards=side.completion_tokens * per_reward,
        usd_per_1000_rewards=None if side.cost_usd is None else side.cost_usd * per_reward,
    )


def _latency(records: Sequence[MetaRecord]) -> JudgeLatency:
    import numpy as np  # deferred: numpy costs 0.2 s of CLI start-up

    seconds = [record.seconds for record in records if record.seconds is not None]
    if not seconds:
        return JudgeLatency(n=0)
    p50, p95 = (float(value) for value in np.percentile(seconds, [50, 95]))
    return JudgeLatency(n=len(seconds), p50=p50, p95=p95)


def _retried(records: Sequence[MetaRecord]) -> int:
    """Answers past the first of each request: each an answer without a usable verdict, asked again."""
    asked = [record.usage.calls for record in records if record.usage is not None and record.usage.calls]
    return sum(asked) - len(asked)


def hackability(judge: Judge, records: Sequence[MetaRecord], *, seed: int, n_bootstrap: int) -> JudgeHackability | None:
    """The grader's trials as their folder holds them, set beside its verdicts on the untouched completions
    (`records`, its meta-eval's); None when it has no trials (none asked, or its meta-eval never finished)."""
    folder = judge.hack
    run = folder.read_run() if folder.path.is_dir() else None
    if run is None and judge.hack_failure is None:
        return None
    trials = folder.read_trials() if folder.path.is_dir() else []
    order = [] if run is None or run.spec.hack is None else run.spec.hack.tricks
    tricked: dict[str, dict[int, bool]] = {name: {} for name in order}
    attackers: dict[str, str | None] = {}
    for trial in trials:
        tricked.setdefault(trial.trick, {})[trial.index] = trial.criteria_met
        attackers[trial.trick] = trial.attacker
    base = {record.index: record.criteria_met for record in records}
    found = fooling(
        base, tricked, {record.index: record.prompt_id for record in records}, seed=seed, n_bootstrap=n_bootstrap
    )
    usage = folder.read(UsageRecord) if run is not None else None
    return JudgeHackability(
        folder=f"{judge.place}/{HACK_FOLDER}",
        rows=len({trial.index for trial in trials}),
        trials=len(trials),
        finished=run is not None and run.stats.finished and judge.hack_failure is None,
        tricks=[TrickFigures.of(name, figures, attackers.get(name)) for name, figures in found.items()],
        worst=worst(found),
        verdict=judge_verdict(found) if found else None,
        usage=usage.whole_run.grader if usage is not None else None,
        failed=run.stats.failed if run is not None else 0,
        failure=judge.hack_failure,
    )


def judge_entry(judge: Judge, *, seed: int, n_bootstrap: int) -> tuple[JudgeEntry, list[MetaRecord]]:
    """The entry of one grader's meta-eval run as its folder holds it (finished or not), and its rows graded."""
    folder = judge.folder
    records = sorted(folder.read_meta_results(), key=lambda record: record.index) if folder.path.is_dir() else []
    run = folder.read_run() if folder.path.is_dir() else None
    metrics = folder.read_metrics() if run is not None and run.stats.finished else None
    entry: dict[str, Any] = {
        "name": judge.name,
        "folder": judge.place,
        "model": judge.model,
        "base_url": judge.base_url,
        "calls": judge.calls,
        "finished": metrics is not None,
        "rows": len(records),
        "completions": len({cluster_of(record) for record in records}),
        "failed_rows": run.stats.failed if run is not None else 0,
        "retried_answers": _retried(records),
        "failure": judge.failure,
        "cost": _cost(folder, records) if run is not None else None,
        "latency": _latency(records),
    }
    if metrics is not None:
        model, physicians = metrics.get(MODEL_F1), metrics.get(PHYSICIAN_F1)
        entry |= {
            "metrics": dict(metrics),
            "macro_f1": None if model is None else float(model),
            "interval": percentile_interval(_resampled([records], seed, n_bootstrap)[:, 0]),
            "physicians_f1": None if physicians is None else float(physicians),
            "categories": _categories(records, dict(metrics), seed, n_bootstrap),
        }
    entry["hackability"] = hackability(judge, records, seed=seed, n_bootstrap=n_bootstrap)
    return JudgeEntry.model_validate(entry), records


def _differences(
    entries: Sequence[JudgeEntry], records: Sequence[Sequence[MetaRecord]], seed: int, n_bootstrap: int
) -> tuple[str | None, list[Difference]]:
    """The leader (highest macro F1 of the finished graders) and each other finished grader's difference from it
    on the same resamples, when they all graded the same rows."""
    finished = [(e, r) for e, r in zip(entries, records, strict=True) if e.finished and e.macro_f1 is not None]
    if not finished:
        return None, []
    leader = max(range(len(finished)), key=lambda i: finished[i][0].macro_f1 or 0.0)
    keys = {tuple((r.index, r.prompt_id, r.completion_id, r.rubric) for r in rows) for _, rows in finished}
    if len(finished) < 2 or len(keys) > 1:
        return finished[leader][0].name, []
    resamples = _resampled([rows for _, rows in finished], seed, n_bootstrap)
    best = finished[leader][0]
    out = []
    for i, (entry, _) in enumerate(finished):
        if i == leader or entry.macro_f1 is None or best.macro_f1 is None:
            continue
        span = percentile_interval(resamples[:, i] - resamples[:, leader])
        out.append(
            Difference(
                name=entry.name,
                difference=entry.macro_f1 - best.macro_f1,
                interval=span,
                decided=span is not None and span[1] < 0,
            )
        )
    return best.name, out


def attacker_entry(
    folder: RunFolder, place: str, *, model: str, base_url: str, strategies: Sequence[str], failure: str | None = None
) -> AttackerEntry:
    """The attacker `model` at `base_url` (as judges.json names it) and its rewrites by `strategies`, as its run
    folder (at `place` under judges.json's folder) holds them, with what stopped it."""
    run = folder.read_run() if folder.path.is_dir() else None
    usage = folder.read(UsageRecord) if run is not None else None
    return AttackerEntry(
        model=model,
        base_url=base_url,
        folder=place,
        strategies=list(strategies),
        rewrites=len(folder.read_rewrites()) if folder.path.is_dir() else 0,
        failed=run.stats.failed if run is not None else 0,
        usage=usage.whole_run.policy if usage is not None else None,
        failure=failure,
    )


def front(entries: Sequence[JudgeEntry]) -> list[str]:
    """The graders with figures on both axes (macro F1; the difference of the trick that fools it most) that no
    other beats on both; a grader whose trials are too few for a verdict has no place among them (its figures
    are noise)."""
    points = {}
    for entry in entries:
        hack = entry.hackability
        worst_trick = None if hack is None or hack.worst is None else hack.trick(hack.worst)
        judged = hack is not None and hack.verdict not in (None, "too few rows")
        if entry.finished and entry.macro_f1 is not None and worst_trick is not None and judged:
            points[entry.name] = (entry.macro_f1, worst_trick.difference)
    return pareto_front(points)


def judges_record(
    judges: Sequence[Judge],
    *,
    data: str,
    data_sha256: str,
    rows: int,
    limit: int | None,
    seed: int,
    n_bootstrap: int = N_BOOTSTRAP,
    tricks: Sequence[str] = (),
    hack_rows: int | None = None,
    attacker: AttackerEntry | None = None,
) -> JudgesRecord:
    """judges.json's record of the graders' runs as their folders hold them, with the `tricks` tried on `hack_rows`
    rows each and the `attacker` that rewrote completions by its strategies."""
    built = [judge_entry(judge, seed=seed, n_bootstrap=n_bootstrap) for judge in judges]
    entries = [entry for entry, _ in built]
    leader, differences = _differences(entries, [records for _, records in built], seed, n_bootstrap)
    return JudgesRecord(
        data=data,
        data_sha256=data_sha256,
        rows=rows,
        limit=limit,
        seed=seed,
        n_bootstrap=n_bootstrap,
        confidence=CONFIDENCE,
        judges=entries,
        leader=leader,
        differences=differences,
        tricks=list(tricks),
        hack_rows=hack_rows if tricks else None,
        attacker=attacker,
        front=front(entries),
    )
