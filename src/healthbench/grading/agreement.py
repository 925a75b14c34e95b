"""Meta-evaluation (docs/SPEC.md section 5): how well a grader agrees with physicians, measured as OpenAI's
reference does.

A meta-eval row is one completion, one consensus criterion and the binary labels of several physicians. The
grader judges each row once, with the bare criterion text as the rubric item. Every (row, physician label) pair
is then one prediction (the grader's verdict) against one truth (the label), pooled over all rows and within each
category. Key names, formulas and edge cases are those of `healthbench_meta_eval.py` in openai/simple-evals,
down to how it derives F1 and balanced keys by substring replacement (so a category whose name contains
"precision" gets no F1 figures, and one containing "pos" no balanced ones). The physician baseline is the same
computation with each physician in turn as the rater and the other physicians of the row as truth; a row with a
single label gives no pairs. These functions are pure;
`runs.metaeval` runs a meta-evaluation and writes its files.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from healthbench.data.tags import THEMES
from healthbench.grading.bootstrap import N_BOOTSTRAP, Bootstrap

MODEL_F1 = "pairwise_model_f1_balanced"
PHYSICIAN_F1 = "pairwise_physician_f1_balanced"


@dataclass(frozen=True)
class Agreement:
    """One agreement figure and the number of label pairs behind it (the reference's `{"n", "value"}`)."""

    n: int
    value: float

    def as_dict(self) -> dict[str, float]:
        """The figure as the reference's metadata records it."""
        return {"n": self.n, "value": self.value}


PairCounts = Counter[tuple[str, bool, bool]]
"""Label pairs by (group, the rater's label, the truth label)."""


def _class(label: bool) -> str:
    return "pos" if label else "neg"


def _count(counts: PairCounts, group: str, said: bool, positive: int, negative: int) -> None:
    """Add the pairs of one rater label against `positive` true and `negative` false truths."""
    # No entry without pairs: a key exists only when it has pairs, as in the reference.
    if positive:
        counts[group, said, True] += positive
    if negative:
        counts[group, said, False] += negative


def agreement_figures(counts: PairCounts, rater: str) -> dict[str, Agreement]:
    """Pairwise precision, recall, F1 and balanced figures of one rater from its label pairs.

    Keys are `pairwise_{rater}_{precision|recall|f1}_{pos|neg|balanced}`, pooled, and the same prefixed by
    `"{group}: "`. Precision of a class counts the pairs where the rater said that class (TP / (TP + FP) for
    pos, TN / (TN + FN) for neg); recall counts the pairs where the truth is that class (TP / (TP + FN),
    TN / (TN + FP)). A figure without pairs is absent, as are the F1 and balanced figures built on it.
    """
    tallies: dict[str, list[int]] = {}  # key -> [pairs, agreeing pairs]
    for (group, said, truth), pairs in counts.items():
        precision = f"pairwise_{rater}_precision_{_class(said)}"
        recall = f"pairwise_{rater}_recall_{_class(truth)}"
        for key in (precision, f"{group}: {precision}", recall, f"{group}: {recall}"):
            tally = tallies.setdefault(key, [0, 0])
            tally[0] += pairs
            tally[1] += pairs if said == truth else 0
    figures = {key: Agreement(n, hits / n) for key, (n, hits) in tallies.items()}
    # The reference pairs keys by plain substring replacement; doing the same keeps its keys and its gaps.
    f1s = {}
    for key, by_prediction in figures.items():
        by_truth = figures.get(key.replace("precision", "recall")) if "precision" in key else None
        if by_truth is not None:
            f1s[key.replace("precision", "f1")] = _f1(by_prediction, by_truth, true_positives=tallies[key][1])
    figures.update(f1s)
    balanced = {}
    for key, pos in figures.items():
        neg = figures.get(key.replace("pos", "neg")) if "pos" in key else None
        if neg is not None:
            balanced[key.replace("pos", "balanced")] = Agreement(pos.n + neg.n, (pos.value + neg.value) / 2)
    figures.update(balanced)
    return figures


def _f1(precision: Agreement, recall: Agreement, *, true_positives: int) -> Agreement:
    p, r = precision.value, recall.value
    value = 0.0 if p == 0 and r == 0 else 2 * (p * r) / (p + r)
    # TP + FP + FN pairs: the reference's n for an F1 figure.
    return Agreement(precision.n + recall.n - true_positives, value)


def rater_agreement(
    rater_labels: Sequence[bool], truths: Sequence[Sequence[bool]], groups: Sequence[str], rater: str
) -> dict[str, Agreement]:
    """`agreement_figures` of a rater who gave one label per row, against that row's truth labels."""
    counts = PairCounts()
    for said, row_truths, group in zip(rater_labels, truths, groups, strict=True):
        positive = sum(row_truths)
        _count(counts, group, said, positive, len(row_truths) - positive)
    return agreement_figures(counts, rater)


def _leave_one_out(labels: Sequence[bool]) -> list[tuple[bool, int, int]]:
    """Each label of a row, with the numbers of true and false labels among the row's other labels."""
    positive = sum(labels)
    return [(label, positive - label, len(labels) - 1 - (positive - label)) for label in labels]


def physician_agreement(
    labels: Sequence[Sequence[bool]], physicians: Sequence[Sequence[str]], groups: Sequence[str]
) -> dict[str, dict[str, Agreement]]:
    """Each physician as the rater against the other physicians of the rows they labelled.

    Returns `{key: {physician_id: Agreement}}`, the reference's `physician_agreement_metric_lists`, with
    `pairwise_physician_*` keys; a physician who never shares a row with another has no figures at all.
    """
    counts: defaultdict[str, PairCounts] = defaultdict(Counter)
    for row_labels, ids, group in zip(labels, physicians, groups, strict=True):
        for physician, (label, positive, negative) in zip(ids, _leave_one_out(row_labels), strict=True):
            _count(counts[physician], group, label, positive, negative)
    by_key: dict[str, dict[str, Agreement]] = {}
    for physician, pairs in counts.items():
        for key, figure in agreement_figures(pairs, "physician").items():
            by_key.setdefault(key, {})[physician] = figure
    return by_key


def pooled_physician_agreement(labels: Sequence[Sequence[bool]], groups: Sequence[str]) -> dict[str, Agreement]:
    """Every physician as the rater in turn, all pairs pooled: the physicians' counterpart of the model's figures."""
    counts = PairCounts()
    for row_labels, group in zip(labels, groups, strict=True):
        for label, positive, negative in _leave_one_out(row_labels):
            _count(counts, group, label, positive, negative)
    return agreement_figures(counts, "physician")


def row_statistics(
    verdicts: Sequence[bool],
    labels: Sequence[Sequence[bool]],
    categories: Sequence[str],
    *,
    seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
) -> dict[str, float | int]:
    """The reference's per-row aggregates: mean, `:n_samples` and `:bootstrap_std` (unclipped) of
    `num_physician_labels`, `percent_physician_pos` and `model_predicted_positive`, pooled and per category,
    and `score:n_samples` / `score:bootstrap_std` of the grader's positive rate (the reference keeps those two
    after replacing `score` by the macro F1). The reference's bootstrap is unseeded; this one is seeded."""
    import numpy as np  # deferred: numpy costs 0.2 s of CLI start-up

    series: dict[str, list[float]] = {}
    for verdict, row_labels, category in zip(verdicts, labels, categories, strict=True):
        row = {
            "num_physician_labels": len(row_labels),
            "percent_physician_pos": sum(row_labels) / len(row_labels),
            "model_predicted_positive": float(verdict),
        }
        for name, value in [*row.items(), *((f"{category}: {k}", v) for k, v in row.items()), ("score", verdict)]:
            series.setdefault(name, []).append(value)
    # One stream of resamples, each sample count's drawn in turn and shared by the series of that count.
    by_count: dict[int, list[str]] = {}
    for name, values in series.items():
        by_count.setdefault(len(values), []).append(name)
    arrays = {name: np.asarray(values, dtype=np.float64) for name, values in series.items()}
    bootstrap = Bootstrap(seed, n_bootstrap)
    means: dict[str, Any] = {}
    for names in by_count.values():
        means |= zip(names, bootstrap.means(*(arrays[name] for name in names)), strict=True)
    out: dict[str, float | int] = {}
    for name, array in arrays.items():
        if name != "score":  # the reference replaces the mean of `score` by the macro F1
            out[name] = float(np.mean(array))
        out[f"{name}:n_samples"] = len(array)
        out[f"{name}:bootstrap_std"] = float(np.std(means[name]))
    return out


def theme_of(category: str) -> str:
    """The theme part of a category `cluster:<theme>_<physician category>_<criterion>`."""
    body = category.removeprefix("cluster:")
    return next((theme for theme in THEMES if body.startswith(theme + "_")), body.split("_", 1)[0])


@dataclass(frozen=True)
class GroupFigures:
    """The grader's macro F1 in one group of rows beside the physicians' (pooled, and spread over physicians)."""

    group: str
    rows: int
    pairs: int
    model_f1: float | None
    physicians_pooled_f1: float | None
    physicians: int
    physician_min: float | None
    physician_median: float | None
    physician_max: float | None


def group_figures(
    verdicts: Sequence[bool],
    labels: Sequence[Sequence[bool]],
    physicians: Sequence[Sequence[str]],
    groups: Sequence[str],
) -> list[GroupFigures]:
    """Macro F1 of the grader and of physicians for all rows (group "all") and for each group, sorted by name.

    The spread is over the physicians whose own macro F1 is defined in that group."""
    model = rater_agreement(verdicts, labels, groups, "model")
    pooled = pooled_physician_agreement(labels, groups)
    each = physician_agreement(labels, physicians, groups)
    rows, pairs = Counter(groups), Counter[str]()
    for row_labels, group in zip(labels, groups, strict=True):
        pairs[group] += len(row_labels)

    def figures(name: str, prefix: str, n_rows: int, n_pairs: int) -> GroupFigures:
        spread = sorted(a.value for a in each.get(prefix + PHYSICIAN_F1, {}).values())
        model_f1, pooled_f1 = model.get(prefix + MODEL_F1), pooled.get(prefix + PHYSICIAN_F1)
        return GroupFigures(
            name,
            n_rows,
            n_pairs,
            None if model_f1 is None else model_f1.value,
            None if pooled_f1 is None else pooled_f1.value,
            len(spread),
            spread[0] if spread else None,
            statistics.median(spread) if spread else None,
            spread[-1] if spread else None,
        )

    overall = figures("all", "", len(groups), sum(pairs.values()))
    return [overall, *(figures(group, f"{group}: ", rows[group], pairs[group]) for group in sorted(rows))]


class Judged(Protocol):
    """A meta-eval row as graded (a results.jsonl record of a meta-eval, say)."""

    @property
    def index(self) -> int: ...
    @property
    def criteria_met(self) -> bool: ...
    @property
    def binary_labels(self) -> Sequence[bool]: ...
    @property
    def anonymized_physician_ids(self) -> Sequence[str]: ...
    @property
    def category(self) -> str: ...


def meta_metrics(records: Sequence[Judged], *, seed: int = 0) -> tuple[dict[str, float | int], dict[str, Any]]:
    """metrics.json and agreement.json of a meta-eval from its results.jsonl records.

    metrics.json holds the reference's metrics (row statistics and every defined `pairwise_model_*` figure,
    pooled and per category), `score` = `pairwise_model_f1_balanced` when defined, and the pooled physician
    baseline under `pairwise_physician_*` keys. agreement.json holds the same figures with their pair counts,
    per physician (the reference's metadata), and the by-theme and by-category comparison of the report.
    """
    ordered = sorted(records, key=lambda record: record.index)
    verdicts = [r.criteria_met for r in ordered]
    labels = [list(r.binary_labels) for r in ordered]
    physicians = [list(r.anonymized_physician_ids) for r in ordered]
    categories = [r.category for r in ordered]
    model = rater_agreement(verdicts, labels, categories, "model")
    pooled = pooled_physician_agreement(labels, categories)
    metrics = row_statistics(verdicts, labels, categories, seed=seed)
    metrics |= {key: figure.value for key, figure in model.items()}
    metrics |= {key: figure.value for key, figure in pooled.items()}
    if MODEL_F1 in model:
        metrics["score"] = model[MODEL_F1].value
    agreement = {
        "model_agreement_metrics": {key: figure.as_dict() for key, figure in model.items()},
        "physician_agreement_pooled": {key: figure.as_dict() for key, figure in pooled.items()},
        "physician_agreement_metric_lists": {
            key: {physician: figure.as_dict() for physician, figure in by_physician.items()}
            for key, by_physician in physician_agreement(labels, physicians, categories).items()
        },
        "by_theme": [asdict(f) for f in group_figures(verdicts, labels, physicians, [theme_of(c) for c in categories])],
        "by_category": [asdict(f) for f in group_figures(verdicts, labels, physicians, categories)][1:],
    }
    return metrics, agreement


def macro_f1_resamples(
    raters: Sequence[Sequence[bool]],
    labels: Sequence[Sequence[bool]],
    clusters: Sequence[str],
    *,
    seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
) -> Any:
    """The pooled macro F1 (`pairwise_model_f1_balanced`) of each rater's verdicts (one per row) against the rows'
    physician labels, in `n_bootstrap` resamples of the clusters (rows of one cluster, such as one completion's,
    are drawn together, as their verdicts and labels are not independent): an array of resamples by raters,
    the same resamples for every rater, so differences between raters are paired. F1 of a class is
    2 TP / (2 TP + FP + FN); NaN in a resample with no pair that either the rater or the truth puts in it."""
    import numpy as np  # deferred: numpy costs 0.2 s of CLI start-up

    names = sorted(set(clusters))
    position = {name: index for index, name in enumerate(names)}
    where = np.asarray([position[c] for c in clusters], dtype=np.int64)
    positive = np.asarray([sum(row) for row in labels], dtype=np.float64)
    negative = np.asarray([len(row) for row in labels], dtype=np.float64) - positive
    # Per cluster and rater: true positive, false positive, false negative and true negative pairs.
    counts = np.zeros((len(names), len(raters), 4))
    for rater, said in enumerate(raters):
        met = np.asarray(said, dtype=np.float64)
        for kind, pairs in enumerate((met * positive, met * negative, (1 - met) * positive, (1 - met) * negative)):
            np.add.at(counts[:, rater, kind], where, pairs)
    tp, fp, fn, tn = np.moveaxis(Bootstrap(seed, n_bootstrap).sums(counts), -1, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        f1_pos = 2 * tp / (2 * tp + fp + fn)
        f1_neg = 2 * tn / (2 * tn + fn + fp)
    return (f1_pos + f1_neg) / 2
