"""meta-eval per reply (a completion's rows in one call) and both modes side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.grading.agreement import MODEL_F1, macro_f1_resamples, meta_metrics
from healthbench.grading.prompt import render_conversation
from healthbench.runs.folder import RunFolder
from healthbench.runs.outputs import MetaComparison
from healthbench.testing import FakeOpenAI
from healthbench.testing.replies import item_verdict, per_reply_items
from tests.conftest import write_jsonl
from tests.reference import KEY
from tests.test_metaeval import made_up_meta_rows, reference_meta_eval


def meta_eval(data: Path, out: Path, base_url: str, *extra: str) -> Result:
    args = ["meta-eval", "--data", str(data), "--out", str(out), "--grader-base-url", base_url, "--no-progress"]
    return CliRunner().invoke(main, [*args, *extra], env={"HEALTHBENCH_GRADER_API_KEY": KEY})


def read_results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().split("\n")[:-1]]


def completions(rows: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(r["prompt_id"], r["completion_id"], json.dumps(r["prompt"])) for r in rows}


def test_per_reply_grades_a_completion_s_rows_in_one_call(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_meta_rows(60)
    data = write_jsonl(tmp_path / "meta.jsonl", rows)
    assert fake.base_url
    result = meta_eval(data, tmp_path / "out", fake.base_url, "--grader-calls", "per-reply")
    assert result.exit_code == 0, result.output
    assert len(fake.bodies) == len(completions(rows)) < len(rows)
    for body in fake.bodies:
        parsed = per_reply_items(body["messages"][-1]["content"])
        assert parsed is not None and all(not text.startswith("[") for _, text in parsed[1])  # bare criteria
    lines = sorted(read_results(tmp_path / "out"), key=lambda r: r["index"])
    records = RunFolder(tmp_path / "out").read_meta_results()
    assert [r["index"] for r in lines] == list(range(len(rows)))
    for row, line in zip(rows, lines, strict=True):
        conversation = render_conversation_of(row)
        assert line["criteria_met"] == item_verdict(conversation, row["rubric"])
    # The reference's figures, from these verdicts: rows as the reference counts them.
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics == pytest.approx(meta_metrics(records, seed=0)[0], abs=1e-12)
    assert sum(r["usage"]["calls"] for r in lines) == len(fake.bodies)
    assert RunFolder(tmp_path / "out").require_run().spec.grader.calls == "per-reply"
    again = meta_eval(data, tmp_path / "out", fake.base_url, "--grader-calls", "per-reply")
    assert again.exit_code == 0 and len(fake.bodies) == len(completions(rows))  # resumed: nothing asked again


def render_conversation_of(row: dict[str, Any]) -> str:
    from healthbench.data.schema import Message

    turns = [Message(**turn) for turn in row["prompt"]] + [Message(role="assistant", content=row["completion"])]
    return render_conversation(turns)


def test_both_modes_side_by_side(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_meta_rows(80)
    data = write_jsonl(tmp_path / "meta.jsonl", rows)
    assert fake.base_url
    result = meta_eval(data, tmp_path / "out", fake.base_url, "--grader-calls", "both")
    assert result.exit_code == 0, result.output
    assert len(fake.bodies) == len(rows) + len(completions(rows))
    item, reply = tmp_path / "out" / "per-item", tmp_path / "out" / "per-reply"
    expected, _ = reference_meta_eval(rows)  # the fake's per-item verdicts, as the reference counts them
    assert json.loads((item / "metrics.json").read_text())[MODEL_F1] == pytest.approx(expected[MODEL_F1], abs=1e-9)
    f1 = {folder: json.loads((folder / "metrics.json").read_text())[MODEL_F1] for folder in (item, reply)}
    output = result.output
    assert (
        f"per-item: grader macro F1 {f1[item]:.4f}" in output
        and f"per-reply: grader macro F1 {f1[reply]:.4f}" in output
    )
    table = output[output.index("macro F1 [95% interval]") :]
    assert f"{f1[item]:.4f} [" in table and f"{f1[reply]:.4f} [" in table
    assert f"{len(rows)} (" in table and f"{len(completions(rows))} (" in table  # calls of each
    assert "prompt tokens (cached)" in table and "per-reply - per-item macro F1" in table
    assert "gpt-4.1 0.709, o4-mini 0.692, o3 0.681, gpt-4.1-mini 0.661, gpt-4.1-nano 0.580" in table
    assert "is what this meta-eval shows for your grader" in table
    # compare's JSON of two meta-eval runs is its record, read back as written.
    shown = CliRunner().invoke(main, ["compare", str(item), str(reply), "--json", "--n-bootstrap", "50"])
    assert shown.exit_code == 0, shown.output
    written = json.loads(shown.output)
    assert MetaComparison.model_validate(written).model_dump(mode="json") == written
    assert written["version"] == 1 and written["paired"] is True
    assert [run["macro_f1"] for run in written["runs"]] == [f1[item], f1[reply]]


def test_the_interval_is_over_completions_and_paired() -> None:
    labels = [[True, True], [False], [True, False], [False, False]] * 25
    clusters = [str(i // 2) for i in range(100)]
    right = [sum(row) * 2 >= len(row) for row in labels]
    wrong = [not said for said in right]
    resamples = macro_f1_resamples([right, right, wrong], labels, clusters, seed=1, n_bootstrap=200)
    assert resamples.shape == (200, 3)
    assert (resamples[:, 0] == resamples[:, 1]).all()  # the same resamples for every rater
    assert resamples[:, 0].mean() > resamples[:, 2].mean()
