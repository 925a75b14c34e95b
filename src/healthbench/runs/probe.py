"""A probe of the grader: every task's reply graded as it is (the base) and rewritten by each transform, each a
sample of its own, then what each transform gains over the base written to probe.json (`ProbeRecord`).

The samples go through `run_jobs` like any run's, so the base replies are graded exactly as `grade` grades them
(the same prompts, the same verdict rules, metrics.json of the base alone), every verdict lands in the store as
it arrives, and the same command resumes where it stopped. A rewritten reply's verdicts are keyed apart from the
base's, so a run sends exactly rubric items x (1 + transforms) grader requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from healthbench.data.schema import Row
from healthbench.errors import SettingsError
from healthbench.grading.gains import gains
from healthbench.grading.transforms import TRANSFORMS, Transform
from healthbench.runs.folder import PROBE, RunFolder
from healthbench.runs.records import Metrics, ProbeRecord, SampleRecord, TransformGain
from healthbench.runs.runner import Job, RunOutcome
from healthbench.runs.session import Start, Wiring, jobs_start
from healthbench.runs.spec import RunSpec


def probe_jobs(
    rows: Sequence[Row],
    replies: Mapping[str, str] | None,
    transforms: Sequence[str],
    attacked: Mapping[str, Transform] | None = None,
) -> list[Job]:
    """Each task's base job (its reply from `replies`, or None to ask the model) and one job per transform (a
    transform named twice counts once); `attacked` holds the transforms of the strategies an attacker rewrote the
    replies by (`attack.strategy_transform`), beside `grading.transforms`' own."""
    known = {**TRANSFORMS, **(attacked or {})}
    transforms = list(dict.fromkeys(transforms))
    unknown = [name for name in transforms if name not in known]
    if unknown:
        raise SettingsError(f"no transform {unknown[0]!r}; choose from {', '.join(known)}")
    jobs = []
    for row in rows:
        reply = None if replies is None else replies[row.prompt_id]
        jobs.append(Job(row, 0, reply))
        jobs += [Job(row, 0, reply, transform=known[name]) for name in transforms]
    return jobs


def summarize(records: Sequence[SampleRecord], metrics: Metrics, spec: RunSpec) -> ProbeRecord:
    """probe.json from a finished probe's samples and metrics (which are of the base replies): each transform's
    gain in the headline task score (length-adjusted when the run adjusts, as `serve`'s reward is)."""
    by_transform: dict[str | None, dict[str, float]] = {}
    for record in records:
        by_transform.setdefault(record.transform, {})[record.prompt_id] = record.headline
    base = by_transform.get(None, {})
    transforms = [] if spec.probe is None else spec.probe.transforms
    found = gains(base, {name: by_transform.get(name, {}) for name in transforms}, seed=spec.seed)
    return ProbeRecord(
        base_mean_score=float(metrics["overall_score"]),
        n_tasks=len(base),
        grader=spec.grader,
        reward="score" if spec.length_adjustment is None else "length_adjusted_score",
        transforms={name: TransformGain.of(gain) for name, gain in found.items()},
    )


def probe_start(jobs: Sequence[Job], folder: RunFolder, spec: RunSpec, *, sample_first: bool) -> Start:
    """The run of `healthbench probe`: every job graded by `run_jobs`, then, when all of them are, probe.json."""

    graded = jobs_start(jobs, folder, spec, sample_first=sample_first)

    async def start(wiring: Wiring) -> RunOutcome:
        folder.discard(PROBE)
        outcome = await graded(wiring)
        if outcome.metrics is not None:
            folder.write(summarize(folder.read_results(), outcome.metrics, spec))
        return outcome

    return start
