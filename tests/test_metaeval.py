"""The meta-evaluation: agreement figures counted by hand, and `healthbench meta-eval` against a loopback grader,
checked against OpenAI's reference computation restated step by step."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.grading.agreement import (
    group_figures,
    physician_agreement,
    pooled_physician_agreement,
    rater_agreement,
    row_statistics,
    theme_of,
)
from healthbench.runs.records import AgreementRecord
from healthbench.testing import FakeOpenAI, prompt_verdict
from tests.conftest import write_jsonl
from tests.reference import KEY, TEMPLATE, sent_prompts

HEDGING, EMERGENCY = "cluster:hedging_no-uncertainty_hedges", "cluster:emergency_referrals_emergent_context_seeking"


def values(figures: dict[str, Any]) -> dict[str, float]:
    return {key: figure.value for key, figure in figures.items()}


def test_three_rows_two_physicians_counted_by_hand() -> None:
    # grader T on (T, F): TP FP; grader F on (F, F): TN TN; grader F on (T, T): FN FN
    verdicts, labels = [True, False, False], [[True, False], [False, False], [True, True]]
    categories = ["cluster:hedging_a_x", "cluster:hedging_a_x", "cluster:hedging_b_y"]
    got = values(rater_agreement(verdicts, labels, categories, "model"))
    f1_pos, f1_neg = 2 * (1 / 2 * 1 / 3) / (1 / 2 + 1 / 3), 2 * (1 / 2 * 2 / 3) / (1 / 2 + 2 / 3)
    assert (f1_pos, f1_neg) == pytest.approx((0.4, 4 / 7))
    a = "cluster:hedging_a_x: pairwise_model_"  # TP 1, FP 1, TN 2, FN 0
    b = "cluster:hedging_b_y: pairwise_model_"  # FN 2 only
    assert got == pytest.approx(
        {
            "pairwise_model_precision_pos": 1 / 2,  # TP / (TP + FP)
            "pairwise_model_recall_pos": 1 / 3,  # TP / (TP + FN)
            "pairwise_model_precision_neg": 2 / 4,  # TN / (TN + FN)
            "pairwise_model_recall_neg": 2 / 3,  # TN / (TN + FP)
            "pairwise_model_f1_pos": 0.4,
            "pairwise_model_f1_neg": 4 / 7,
            "pairwise_model_precision_balanced": (1 / 2 + 2 / 4) / 2,
            "pairwise_model_recall_balanced": (1 / 3 + 2 / 3) / 2,
            "pairwise_model_f1_balanced": 17 / 35,
            a + "precision_pos": 1 / 2,
            a + "recall_pos": 1.0,
            a + "precision_neg": 1.0,
            a + "recall_neg": 2 / 3,
            a + "f1_pos": 2 / 3,
            a + "f1_neg": 4 / 5,
            a + "precision_balanced": 3 / 4,
            a + "recall_balanced": 5 / 6,
            a + "f1_balanced": 11 / 15,
            # no grader "pos" and no physician "neg" in b: two figures, no F1, nothing balanced
            b + "precision_neg": 0.0,
            b + "recall_pos": 0.0,
        },
        abs=1e-12,
    )
    figures = rater_agreement(verdicts, labels, categories, "model")
    assert figures["pairwise_model_f1_pos"].n == 4  # TP + FP + FN
    assert figures["pairwise_model_f1_balanced"].n == 4 + 5  # and TN + FN + FP

    ids = [["A", "B"], ["A", "B"], ["A", "C"]]
    each = physician_agreement(labels, ids, categories)
    # A: T vs F (FP), F vs F (TN), T vs T (TP); B: F vs T (FN), F vs F (TN); C: T vs T (TP)
    assert {p: f.value for p, f in each["pairwise_physician_f1_balanced"].items()} == pytest.approx({"A": 2 / 3})
    assert {p: f.value for p, f in each["pairwise_physician_f1_neg"].items()} == pytest.approx({"A": 2 / 3, "B": 2 / 3})
    assert {p: f.value for p, f in each["pairwise_physician_f1_pos"].items()} == pytest.approx({"A": 2 / 3, "C": 1.0})
    pooled = values(pooled_physician_agreement(labels, categories))  # TP 2, FP 1, FN 1, TN 2
    assert pooled["pairwise_physician_precision_pos"] == pooled["pairwise_physician_recall_neg"] == 2 / 3
    assert pooled["pairwise_physician_f1_balanced"] == pytest.approx(2 / 3)

    [overall, theme] = group_figures(verdicts, labels, ids, [theme_of(c) for c in categories])
    assert (overall.group, overall.rows, overall.pairs, theme.group) == ("all", 3, 6, "hedging")
    assert overall.model_f1 == pytest.approx(17 / 35) and overall.physicians_pooled_f1 == pytest.approx(2 / 3)
    assert overall.physicians == 1 and overall.physician_min == overall.physician_max == pytest.approx(2 / 3)


def test_the_reference_unit_test_scenario() -> None:
    # rater T against (T, T, F), F against (T, F), T against (F); clusters a, a, b
    got = rater_agreement([True, False, True], [[True, True, False], [True, False], [False]], ["a", "a", "b"], "model")
    assert (got["pairwise_model_precision_pos"].value, got["pairwise_model_precision_pos"].n) == (2 / 4, 4)
    assert (got["pairwise_model_precision_neg"].value, got["pairwise_model_precision_neg"].n) == (1 / 2, 2)
    assert (got["pairwise_model_recall_pos"].value, got["pairwise_model_recall_pos"].n) == (2 / 3, 3)
    assert (got["pairwise_model_recall_neg"].value, got["pairwise_model_recall_neg"].n) == (1 / 3, 3)
    assert got["a: pairwise_model_precision_pos"].value == 2 / 3 and got["a: pairwise_model_recall_neg"].value == 1 / 2
    assert got["b: pairwise_model_precision_pos"].value == 0 and got["b: pairwise_model_recall_neg"].value == 0
    assert not {"b: pairwise_model_precision_neg", "b: pairwise_model_recall_pos", "b: pairwise_model_f1_pos"} & set(
        got
    )
    assert not {"b: pairwise_model_f1_neg", "b: pairwise_model_f1_balanced"} & set(got)


def test_category_names_are_matched_by_substring_as_the_reference_does() -> None:
    # the reference derives neg and balanced keys by replacing "pos" everywhere in the key, the category included
    got = rater_agreement(
        [True, False], [[True, False], [False, True]], ["cluster:x_purpose", "cluster:x_purpose"], "m"
    )
    assert "cluster:x_purpose: pairwise_m_f1_pos" in got and "cluster:x_purpose: pairwise_m_f1_neg" in got
    assert not [key for key in got if key.startswith("cluster:x_purpose") and key.endswith("balanced")]
    assert "pairwise_m_f1_balanced" in got


def test_rows_with_a_single_label_give_no_physician_pairs() -> None:
    each = physician_agreement([[True], [False, False]], [["solo"], ["A", "B"]], ["c", "c"])
    assert all("solo" not in by_physician for by_physician in each.values())
    assert each["pairwise_physician_precision_neg"]["A"].n == 1
    assert pooled_physician_agreement([[True], [False]], ["c", "c"]) == {}


def test_row_statistics_and_themes() -> None:
    stats = row_statistics([True, False, True], [[True, False], [True], [False, False, True]], ["c1", "c1", "c2"])
    assert stats["num_physician_labels"] == 2.0 and stats["num_physician_labels:n_samples"] == 3
    assert stats["percent_physician_pos"] == pytest.approx((1 / 2 + 1 + 1 / 3) / 3)
    assert stats["model_predicted_positive"] == pytest.approx(2 / 3) and stats["c2: model_predicted_positive"] == 1.0
    assert stats["c1: num_physician_labels:n_samples"] == 2 and stats["score:n_samples"] == 3 and "score" not in stats
    assert stats["c2: model_predicted_positive:bootstrap_std"] == 0.0
    assert 0 < stats["score:bootstrap_std"] < 0.5
    assert row_statistics([True, False], [[True], [True]], ["c", "c"], seed=5) == row_statistics(
        [True, False], [[True], [True]], ["c", "c"], seed=5
    )
    assert theme_of("cluster:health_data_tasks_enough-info-to-complete-task_accuracy_safety") == "health_data_tasks"
    assert theme_of("cluster:emergency_referrals_emergent_context_seeking") == "emergency_referrals"
    assert theme_of("cluster:new_theme_x") == "new"


# --- the reference, restated: healthbench_meta_eval.py of openai/simple-evals --------------------------------


def reference_rater(
    self_preds: Sequence[bool], others: Sequence[Sequence[bool]], clusters: Sequence[str], who: str
) -> dict[str, dict[str, float]]:
    """compute_metrics_for_rater_by_class: lists of agreements by key, then F1 and balanced by key replacement."""
    lists: dict[str, list[bool]] = defaultdict(list)
    for self_pred, other_preds, cluster in zip(self_preds, others, clusters, strict=True):
        for other in other_preds:
            precision = f"pairwise_{who}_precision_{'pos' if self_pred else 'neg'}"
            recall = f"pairwise_{who}_recall_{'pos' if other else 'neg'}"
            for key in (precision, f"{cluster}: {precision}", recall, f"{cluster}: {recall}"):
                lists[key].append(self_pred == other)
    metrics: dict[str, dict[str, float]] = {k: {"n": len(v), "value": sum(v) / len(v)} for k, v in lists.items()}
    f1s = {}
    for key in metrics:
        if "precision" in key and (recall := key.replace("precision", "recall")) in metrics:
            p, r = metrics[key]["value"], metrics[recall]["value"]
            n = metrics[key]["n"] + metrics[recall]["n"] - p * metrics[key]["n"]
            f1s[key.replace("precision", "f1")] = {"n": n, "value": 0.0 if p == 0 and r == 0 else 2 * (p * r) / (p + r)}
    metrics.update(f1s)
    balanced = {}
    for key in metrics:
        if "pos" in key and (neg := key.replace("pos", "neg")) in metrics:
            pos_n, neg_n = metrics[key]["n"], metrics[neg]["n"]
            value = (metrics[key]["value"] + metrics[neg]["value"]) / 2
            balanced[key.replace("pos", "balanced")] = {"n": pos_n + neg_n, "value": value}
    metrics.update(balanced)
    return metrics


def reference_meta_eval(rows: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """The reference's metrics (means and agreement values) and its physician_agreement_metric_lists."""
    verdicts = []
    name2values: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        convo = [*row["prompt"], {"role": "assistant", "content": row["completion"]}]
        convo_str = "\n\n".join(f"{m['role']}: {m['content']}" for m in convo)
        label = prompt_verdict(
            TEMPLATE.replace("<<conversation>>", convo_str).replace("<<rubric_item>>", row["rubric"])
        )
        verdicts.append(label)
        labels = row["binary_labels"]
        row_metrics = {
            "num_physician_labels": len(labels),
            "percent_physician_pos": sum(labels) / len(labels),
            "model_predicted_positive": label,
        }
        for name, value in [*row_metrics.items(), *((f"{row['category']}: {k}", v) for k, v in row_metrics.items())]:
            name2values[name].append(value)
    metrics = {name: float(np.mean(v)) for name, v in name2values.items()}
    model = reference_rater(verdicts, [r["binary_labels"] for r in rows], [r["category"] for r in rows], "model")
    metrics |= {k: v["value"] for k, v in model.items() if v["value"] is not None}
    by_physician: dict[str, tuple[list[bool], list[list[bool]], list[str]]] = defaultdict(lambda: ([], [], []))
    for row in rows:
        for i, label in enumerate(row["binary_labels"]):
            lists = by_physician[row["anonymized_physician_ids"][i]]
            lists[0].append(label)
            lists[1].append(row["binary_labels"][:i] + row["binary_labels"][i + 1 :])
            lists[2].append(row["category"])
    physician_lists: dict[str, dict[str, Any]] = defaultdict(dict)
    for physician, (own, others, clusters) in by_physician.items():
        for key, figure in reference_rater(own, others, clusters, "physician").items():
            physician_lists[key][physician] = figure
    return metrics, physician_lists


CATEGORIES = [
    HEDGING,
    EMERGENCY,
    "cluster:context_seeking_enough-context_precise",
    "cluster:global_health_context-matters-is-clear_language",
    "cluster:complex_responses_precision_made-up",  # "precision" inside a name: no F1 there, as in the reference
    "cluster:communication_purpose_made-up",  # "pos" inside a name: no balanced figures there
]


def made_up_meta_rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """Rows in the official meta-eval schema (made up): 1 to 5 labels from 15 physicians, some rows with one."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        ids = rng.sample([f"phys-{j:02d}" for j in range(15)], rng.choice([1, 2, 2, 3, 3, 4, 5]))
        turns = [{"role": "user", "content": f"Question {i // 4}: is this rash serious?"}]
        if i % 5 == 0:
            turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, *turns]
        rows.append(
            {
                "prompt": turns,
                "completion": f"Completion {i // 2}: see a doctor if it spreads.",
                "rubric": f"Advises on warning sign {i % 9}",
                "category": rng.choice(CATEGORIES),
                "binary_labels": [rng.random() < 0.6 for _ in ids],
                "anonymized_physician_ids": ids,
                "prompt_id": f"prompt-{i // 4}",
                "completion_id": f"completion-{i // 2}",
            }
        )
    return rows


def meta_eval(data: Path, out: Path, base_url: str, *extra: str) -> Result:
    args = ["meta-eval", "--data", str(data), "--out", str(out), "--grader-base-url", base_url, "--no-progress"]
    return CliRunner().invoke(main, [*args, *extra], env={"HEALTHBENCH_GRADER_API_KEY": KEY})


def read_results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().split("\n")[:-1]]


def test_meta_eval_matches_the_reference(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_meta_rows(400)
    data = write_jsonl(tmp_path / "meta.jsonl", rows)
    assert fake.base_url
    result = meta_eval(data, tmp_path / "out", fake.base_url)
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    expected, physician_lists = reference_meta_eval(rows)
    model_keys = {k for k in metrics if "pairwise_model" in k}
    assert model_keys == {k for k in expected if "pairwise_model" in k}
    # 9 figures pooled and in each of 6 categories, but no F1 in the "precision" one, no balanced in the "pos" one
    assert len(model_keys) == 7 * 9 - 3 - 3
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=1e-9), key
    assert metrics["score"] == metrics["pairwise_model_f1_balanced"]
    assert metrics[f"{HEDGING}: model_predicted_positive:n_samples"] == sum(r["category"] == HEDGING for r in rows)
    own, others, clusters = [], [], []
    for row in rows:
        labels = row["binary_labels"]
        for i, label in enumerate(labels):
            own.append(label)
            others.append(labels[:i] + labels[i + 1 :])
            clusters.append(row["category"])
    pooled = reference_rater(own, others, clusters, "physician")
    assert {k: v for k, v in metrics.items() if "pairwise_physician" in k} == pytest.approx(
        {k: v["value"] for k, v in pooled.items()}, abs=1e-9
    )
    agreement = json.loads((tmp_path / "out" / "agreement.json").read_text())
    # Written by its record, and read back as written: every key a typed field, the version first.
    assert AgreementRecord.model_validate(agreement).model_dump(mode="json") == agreement
    assert next(iter(agreement)) == "version" and agreement["version"] == 1
    assert agreement["physician_agreement_metric_lists"].keys() == physician_lists.keys()
    for key, by_physician in physician_lists.items():
        got = agreement["physician_agreement_metric_lists"][key]
        assert got.keys() == by_physician.keys(), key
        for physician, figure in by_physician.items():
            assert got[physician] == pytest.approx(figure, abs=1e-9), (key, physician)

    # one grader call per row, with the bare criterion as the rubric item
    prompts = sent_prompts(fake)
    assert sum(prompts.values()) == len(rows) and all("[" not in p.split("# Rubric item")[1][:5] for p in prompts)
    results = read_results(tmp_path / "out")
    assert sorted(r["index"] for r in results) == list(range(400))
    first = next(r for r in results if r["index"] == 0)
    assert {k: first[k] for k in rows[0] if k != "prompt" and k != "completion"} == {
        k: v for k, v in rows[0].items() if k not in ("prompt", "completion")
    }
    assert isinstance(first["criteria_met"], bool) and first["explanation"] == "fake verdict"
    report = (tmp_path / "out" / "report.html").read_text()
    assert "By theme" in report and "hedging" in report and "context_seeking" in report


def test_rerun_is_free_limit_matches_the_reference_and_report_rebuilds(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_meta_rows(60)
    chosen = random.Random(0).sample(rows, 25)
    chosen[0]["category"] = "cluster:hedging_<script>alert(1)</script>"
    data = write_jsonl(tmp_path / "meta.jsonl", rows)
    assert fake.base_url
    assert meta_eval(data, tmp_path / "out", fake.base_url, "--limit", "25").exit_code == 0
    results = read_results(tmp_path / "out")
    assert [(r["prompt_id"], r["completion_id"], r["rubric"]) for r in sorted(results, key=lambda r: r["index"])] == [
        (r["prompt_id"], r["completion_id"], r["rubric"]) for r in chosen
    ]
    expected, _ = reference_meta_eval(chosen)
    metrics_bytes = (tmp_path / "out" / "metrics.json").read_bytes()
    assert json.loads(metrics_bytes)["pairwise_model_f1_balanced"] == pytest.approx(
        expected["pairwise_model_f1_balanced"]
    )
    report = (tmp_path / "out" / "report.html").read_text()
    assert "<script>alert(1)" not in report and "&lt;script&gt;alert(1)" in report

    fake.reset()
    again = meta_eval(data, tmp_path / "out", fake.base_url, "--limit", "25")
    assert again.exit_code == 0, again.output
    assert fake.requests_total == 0 and "(25 verdicts reused)" in again.output
    assert (tmp_path / "out" / "metrics.json").read_bytes() == metrics_bytes
    # A reused verdict keeps what it cost when asked: each line still counts its call, and the lines add up to the
    # whole run in usage.json.
    lines = read_results(tmp_path / "out")
    usage = json.loads((tmp_path / "out" / "usage.json").read_text())
    assert [line["usage"]["calls"] for line in lines] == [1] * 25
    for figure in ("calls", "prompt_tokens", "completion_tokens"):
        assert sum(line["usage"][figure] for line in lines) == usage["whole_run"]["grader"][figure]
    refused = meta_eval(data, tmp_path / "out", fake.base_url, "--limit", "26")
    assert refused.exit_code == 1 and "other settings (limit: 25 -> 26)" in refused.output

    (tmp_path / "out" / "metrics.json").unlink()
    rebuilt = CliRunner().invoke(main, ["report", str(tmp_path / "out")])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert (tmp_path / "out" / "metrics.json").read_bytes() == metrics_bytes


def test_ungradable_row_fails_the_run_and_resumes(tmp_path: Path) -> None:
    rows = made_up_meta_rows(30)
    data = write_jsonl(tmp_path / "meta.jsonl", rows)
    with FakeOpenAI(fail_always=lambda body: "warning sign 4" in body["messages"][1]["content"]) as server:
        assert server.base_url
        result = meta_eval(data, tmp_path / "out", server.base_url, "--max-attempts", "2")
    failing = [i for i, r in enumerate(rows) if r["rubric"].endswith("4")]
    assert result.exit_code == 1
    assert f"meta-eval row {failing[0]} (prompt {rows[failing[0]]['prompt_id']}, completion" in result.output
    assert f"{len(failing)} of 30 rows could not be graded; no score written" in result.output
    assert not (tmp_path / "out" / "metrics.json").exists()
    assert len(read_results(tmp_path / "out")) == 30 - len(failing)
    with FakeOpenAI() as server:
        assert server.base_url
        resumed = meta_eval(data, tmp_path / "out", server.base_url)
        assert resumed.exit_code == 0, resumed.output
        assert server.requests_total == len(failing)
    expected, _ = reference_meta_eval(rows)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert {k: metrics[k] for k in expected} == pytest.approx(expected, abs=1e-9)
