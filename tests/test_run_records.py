"""The run record as types: folders written by the release before it (run.json without a schema version, in
tests/data/v1-runs, made-up rows only) are read into the same types, and `report`, `compare` and `leaderboard` give
the numbers that release gave on them (tests/data/v1-expected); a new run.json is versioned and read back as
written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from healthbench.cli import main
from healthbench.reporting import leaderboard
from healthbench.reporting.compare import compare_dirs
from healthbench.runs.folder import RunFolder
from healthbench.runs.records import RUN_SCHEMA_VERSION, RunRecord
from healthbench.runs.store import Store
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl

DATA = Path(__file__).parent / "data"
V1 = DATA / "v1-runs"
EXPECTED = DATA / "v1-expected"
FOLDERS = sorted(path.name for path in V1.iterdir())
KEY = "sk-never-stored-4242"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A copy of the version-1 folders, free to be rewritten."""
    return Path(shutil.copytree(V1, tmp_path / "runs"))


def expected(name: str) -> Any:
    return json.loads((EXPECTED / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", FOLDERS)
def test_report_of_a_version_1_folder_writes_the_same_metrics(runs: Path, name: str) -> None:
    before = (runs / name / "metrics.json").read_text(encoding="utf-8")
    result = CliRunner().invoke(main, ["report", str(runs / name)])
    assert result.exit_code == 0, result.output
    assert json.loads((runs / name / "metrics.json").read_text(encoding="utf-8")) == json.loads(before)
    assert "<!DOCTYPE html>" in (runs / name / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "pair", ["grade grade-b", "grade grade-adjusted", "eval eval-b", "professional professional-unofficial"]
)
def test_compare_of_version_1_folders_gives_the_same_means(runs: Path, pair: str) -> None:
    a, b = pair.split()
    old = expected(f"compare-{a}-{b}.json")
    new = compare_dirs(runs / a, runs / b)
    assert new["headline"] == old["headline"] and new["headlines"] == old["headlines"]
    assert new["headline_mismatch"] == old["headline_mismatch"]
    assert new["metrics"].keys() == old["metrics"].keys()
    repeats = RunFolder(runs / a).require_run().spec.n_repeats
    for metric, figures in old["metrics"].items():
        for key in ("mean_a", "mean_b", "diff", "mean_a_unclipped", "mean_b_unclipped", "clipped"):
            assert new["metrics"][metric][key] == pytest.approx(figures[key]), (metric, key)
        if repeats == 1:
            # Without repeats a task is a sample: resampling tasks is the bootstrap the release before did.
            assert (new["metrics"][metric]["ci_low"], new["metrics"][metric]["ci_high"]) == (
                pytest.approx(figures["ci_low"]),
                pytest.approx(figures["ci_high"]),
            )
            assert new["metrics"][metric]["n"] == figures["n"]
    assert new["n_tasks"] * repeats == old["n_pairs"]


def test_leaderboard_of_version_1_folders_is_the_same(runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(runs)  # the expected board names the folders as given, relative to their parent
    names = ["grade", "grade-b", "grade-adjusted", "eval", "eval-b", "baseline", "baseline-references"]
    names += ["professional", "professional-unofficial"]
    board = expected("leaderboard.json")
    del board["page"]  # where the command wrote its page, which build() does not write
    built = leaderboard.build([Path(name) for name in names])
    for run in built["runs"]:
        # Fields added after these folders were written: how the grader was called, and the cost column.
        assert run.pop("grader_calls") == "per-item"
        assert run.pop("split") is None  # the training split graded: none before splits existed
        for added in ("cost_usd", "grader_cache_hit_rate", "grader_cache_saved_usd", "cost"):
            run.pop(added)
    assert built == board


def test_a_version_1_run_json_reads_into_the_spec_its_store_was_bound_to() -> None:
    record = RunFolder(V1 / "eval").require_run()
    assert record.version == 1
    spec = record.spec
    assert (spec.command, spec.n_repeats, spec.policy and spec.policy.model) == ("eval", 2, "gpt-4.1")
    assert spec.grader.model == "gpt-4.1-2025-04-14" and spec.grader.request is not None
    store = Store(V1 / "eval" / "progress.sqlite")
    try:
        # What a resumed run checks its settings against: the spec gives the very identity the release bound.
        assert spec.identity() == store.config()
    finally:
        store.close()
    professional = RunFolder(V1 / "professional-unofficial").require_run().spec
    assert professional.official is not None and not professional.official.configuration
    assert [d.setting for d in professional.official.differences] == ["grader model", "grader reasoning effort"]
    baseline = RunFolder(V1 / "baseline-references").require_run().spec
    assert baseline.baseline is not None and (baseline.baseline.group, baseline.baseline.references) == (2, True)


def test_a_new_run_json_is_versioned_and_read_back_as_written(tmp_path: Path) -> None:
    rows = write_jsonl(tmp_path / "rows.jsonl", [make_row(f"p{i}") for i in range(3)])
    replies = write_jsonl(tmp_path / "r.jsonl", [{"prompt_id": f"p{i}", "response": "Rest."} for i in range(3)])
    with FakeOpenAI() as fake:
        args = ["grade", "--data", rows, "--responses", replies, "--grader-base-url", fake.base_url, "--no-progress"]
        result = CliRunner().invoke(
            main, [*map(str, args), "--out", str(tmp_path / "out")], env={"OPENAI_API_KEY": KEY}
        )
    assert result.exit_code == 0, result.output
    raw = json.loads((tmp_path / "out" / "run.json").read_text(encoding="utf-8"))
    assert raw["version"] == RUN_SCHEMA_VERSION and set(raw) == {"version", "spec", "stats"}
    record = RunRecord.read(raw)
    assert record.model_dump(mode="json") == raw
    assert record.spec.responses == str(replies) and record.stats.samples == 3 and record.stats.finished
    assert KEY not in json.dumps(raw)
