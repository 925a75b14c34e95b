"""OpenAI's reference computation, restated step by step for the tests to compare against."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from healthbench.testing import FakeOpenAI, prompt_verdict
from tests.conftest import make_row

KEY = "sk-test-never-printed-0123456789"
TEMPLATE = (Path(__file__).parents[1] / "src" / "healthbench" / "grading" / "grader_template.txt").read_text(
    encoding="utf-8"
)


def reference_metrics(
    rows: list[dict[str, Any]], replies: dict[str, str], verdict: Callable[[str, str], bool] | None = None
) -> tuple[list[dict[str, float]], Counter[str]]:
    """Per-task metrics and grader prompts computed the way OpenAI's reference code does, step by step; with
    `verdict` (of the conversation and the item), verdicts given so instead of the fake's for each prompt."""
    per_task, prompts = [], Counter[str]()
    for row in rows:
        if row["prompt_id"] not in replies:
            continue
        convo = [*row["prompt"], {"role": "assistant", "content": replies[row["prompt_id"]]}]
        convo_str = "\n\n".join(f"{m['role']}: {m['content']}" for m in convo)
        grades = []
        for item in row["rubrics"]:
            prompt = TEMPLATE.replace("<<conversation>>", convo_str).replace(
                "<<rubric_item>>", f"[{item['points']}] {item['criterion']}"
            )
            prompts[prompt] += 1
            item_text = f"[{item['points']}] {item['criterion']}"
            grades.append(prompt_verdict(prompt) if verdict is None else verdict(convo_str, item_text))

        def calc(items: list[dict[str, Any]], met: list[bool]) -> float | None:
            total = sum(i["points"] for i in items if i["points"] > 0)
            return None if total == 0 else sum(i["points"] for i, m in zip(items, met, strict=True) if m) / total

        overall = calc(row["rubrics"], grades)
        assert overall is not None
        metrics = {"overall_score": overall, **dict.fromkeys(row["example_tags"], overall)}
        by_tag: dict[str, list[tuple[dict[str, Any], bool]]] = defaultdict(list)
        for item, met in zip(row["rubrics"], grades, strict=True):
            for tag in item["tags"]:
                by_tag[tag].append((item, met))
        for tag, pairs in by_tag.items():
            value = calc([p[0] for p in pairs], [p[1] for p in pairs])
            if value is not None:
                metrics[tag] = value
        per_task.append(metrics)
    return per_task, prompts


def expected_means(per_task: list[dict[str, float]]) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for metrics in per_task:
        for name, value in metrics.items():
            values[name].append(value)
        values["score"].append(metrics["overall_score"])
    return {name: min(1.0, max(0.0, sum(v) / len(v))) for name, v in values.items()}


def sent_prompts(server: FakeOpenAI) -> Counter[str]:
    """The grader prompts the server received, with multiplicity."""
    return Counter(b["messages"][1]["content"] for b in server.bodies)


def check_against_reference(
    out: Path, rows: list[dict[str, Any]], replies: dict[str, str], verdict: Callable[[str, str], bool] | None = None
) -> Counter[str]:
    """Assert the metrics equal the reference-style ones (1e-9), from the fake's verdicts or `verdict`'s (see
    `reference_metrics`); return the prompts the reference would send."""
    per_task, prompts = reference_metrics(rows, replies, verdict)
    metrics = json.loads((out / "metrics.json").read_text())
    expected = expected_means(per_task)
    assert {k for k in metrics if ":" not in k or not k.endswith(("n_samples", "bootstrap_std"))} == set(expected)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, abs=1e-9), name
        assert metrics[f"{name}:n_samples"] == sum(name in m for m in per_task) or name == "score"
        assert 0 <= metrics[f"{name}:bootstrap_std"] <= 0.5
    return prompts


def made_up_rows() -> list[dict[str, Any]]:
    cluster = ("axis:context_awareness", "level:cluster", "cluster:context_seeking_enough-context_helpful_safe")
    return [
        make_row("single"),
        make_row(
            "multi",
            prompt=(
                ("system", "You are terse."),
                ("user", "My child has a fever."),
                ("assistant", "How old?"),
                ("user", "Two."),
            ),
            rubrics=(
                (7, "Asks about temperature", ("axis:completeness", "level:example")),
                (-8, "Recommends aspirin for a child", ("axis:accuracy", "level:example")),
                (5, "Seeks the context needed", cluster),
                (-2, "Is verbose", ("axis:communication_quality", "level:example")),
            ),
            example_tags=("theme:context_seeking", "physician_agreed_category:enough-context"),
        ),
        *[make_row(f"r{i}", prompt=(("user", f"question {i} <<rubric_item>>"),)) for i in range(20)],
    ]
