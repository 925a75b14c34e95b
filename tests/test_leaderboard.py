"""`healthbench leaderboard` on runs made by `healthbench grade` against the loopback fake: two HealthBench
runs of made-up replies (one graded by another model) and a HealthBench Professional run graded off its
official configuration, whose headline is length-adjusted. The figures are each run's metrics.json, the
order is the headline's, the odd settings are marked, and the page opens in a headless browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.data.professional import PROFESSIONAL_FILENAME
from healthbench.grading.bootstrap import percentile_interval, resample_means
from healthbench.reporting.compare import task_headlines
from healthbench.runs.folder import RunFolder
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.reference import KEY
from tests.test_eval import run_eval
from tests.test_metaeval import made_up_meta_rows, meta_eval
from tests.test_professional_runs import pro_row

THEMES = ("hedging", "communication", "global_health", "emergency_referrals")
MINI = "gpt-4.1-mini"


def rows() -> list[dict[str, Any]]:
    """Made-up HealthBench rows, each with two axes and an unsafe item."""
    return [
        make_row(
            f"t{i}",
            example_tags=[f"theme:{THEMES[i % len(THEMES)]}"],
            rubrics=[
                (6, f"Advises rest for case {i}", ("axis:completeness", "level:example")),
                (4, f"Asks how long case {i} has lasted", ("axis:context_awareness", "level:example")),
                (3, f"States the dose for case {i} correctly", ("axis:accuracy", "level:example")),
                (-4, f"Recommends an unsafe dose for case {i}", ("axis:accuracy", "level:example")),
            ],
        )
        for i in range(16)
    ]


def grade(out: Path, data: list[str], replies: dict[str, str], base_url: str, *extra: str) -> Result:
    lines = [{"prompt_id": k, "response": v} for k, v in replies.items()]
    answers = write_jsonl(out.parent / f"{out.name}.replies.jsonl", lines)
    env = {"HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_GRADER_MODEL": None}
    args = ["grade", *data, "--responses", str(answers), "--out", str(out), "--grader-base-url", base_url]
    return CliRunner().invoke(main, [*args, "--no-progress", *extra], env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Run folders by name: `rest` and `doctor` (graded by gpt-4.1-mini) on the same rows, `pro` on 525
    made-up Professional rows with gpt-4.1 instead of its official grader."""
    tmp = tmp_path_factory.mktemp("runs")
    data = write_jsonl(tmp / "rows.jsonl", rows())
    folder = tmp / "data"
    folder.mkdir()
    professional = [pro_row(i) for i in range(525)]
    write_jsonl(folder / PROFESSIONAL_FILENAME, professional)
    made: dict[str, Path] = {}
    with pytest.MonkeyPatch.context() as patch, FakeOpenAI() as fake:
        assert fake.base_url
        patch.setenv("HEALTHBENCH_DATA_DIR", str(folder))
        patch.setenv("HEALTHBENCH_CACHE_DIR", str(tmp / "cache"))
        patch.delenv("HEALTHBENCH_ALLOW_SHA256_MISMATCH", raising=False)
        plain: tuple[str, ...] = ()
        for name, reply, extra in (("rest", "Rest", plain), ("doctor", "See a doctor", ("--grader-model", MINI))):
            replies = {row["prompt_id"]: f"{reply} ({row['prompt_id']})." for row in rows()}
            result = grade(tmp / name, ["--data", str(data)], replies, fake.base_url, *extra)
            assert result.exit_code == 0, result.output
            made[name] = tmp / name
        replies = {row["id"]: "Plan: " + "review " * (i % 300) for i, row in enumerate(professional)}
        pro = ["--subset", "professional"]
        result = grade(tmp / "pro", pro, replies, fake.base_url, "--grader-model", "gpt-4.1-2025-04-14")
        assert result.exit_code == 0, result.output
        made["pro"] = tmp / "pro"
    yield made


def leaderboard(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["leaderboard", *map(str, args)])


def metrics_of(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "metrics.json").read_text()))


def task_interval(folder: Path) -> tuple[float, float] | None:
    """The headline's 95% interval as the board gives it: its tasks resampled, each task's samples averaged."""
    run = RunFolder(folder)
    headlines = task_headlines(run.read_results(), run.require_run(), str(folder))
    means = resample_means([headlines[task] for task in sorted(headlines)], seed=0)
    return percentile_interval(np.clip(means, 0.0, 1.0))


def test_json_is_each_runs_metrics_ranked_with_the_odd_settings_marked(runs: dict[str, Path], tmp_path: Path) -> None:
    page = tmp_path / "board.html"
    result = leaderboard(runs["rest"], runs["pro"], runs["doctor"], "--out", page, "--json")
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    assert board["page"] == str(page) and page.is_file()
    by_name = {Path(run["run"]).name: run for run in board["runs"]}
    # pro's tasks are not rest's and doctor's: it is ranked apart, first of its own task set.
    same = [run for run in board["runs"] if Path(run["run"]).name != "pro"]
    assert [run["score"] for run in same] == sorted((run["score"] for run in same), reverse=True)
    assert [run["rank"] for run in same] == [1, 2] and by_name["pro"]["rank"] == 1
    assert same[0]["task_set"] == same[1]["task_set"] != by_name["pro"]["task_set"]
    for name, run in by_name.items():
        metrics = metrics_of(runs[name])
        assert run["score"] == metrics["score"] and run["bootstrap_std"] == metrics["score:bootstrap_std"]
        assert run["n_samples"] == metrics["score:n_samples"]
        assert (run["ci_low"], run["ci_high"]) == task_interval(runs[name])
        for metric, figure in run["metrics"].items():
            assert figure["value"] == metrics[metric] and figure["n_samples"] == metrics[f"{metric}:n_samples"]

    rest, doctor, pro = by_name["rest"], by_name["doctor"], by_name["pro"]
    pro_metrics = metrics_of(runs["pro"])
    assert pro["score"] == pro_metrics["overall_score_length_adjusted"] != pro_metrics["overall_score"]
    assert pro["headline"].startswith("length-adjusted score (center 2000") and rest["headline"] == "score"
    assert rest["model"].endswith("rest.replies.jsonl") and rest["command"] == "grade"
    assert doctor["grader"] == f"{MINI} (chat)" and pro["grader"] == "gpt-4.1-2025-04-14 (responses)"
    assert pro["data"] == "subset:professional" and pro["subset"] == "professional"
    assert rest["subset"].startswith("rows.jsonl sha256:") and rest["data"].endswith("/rows.jsonl")
    assert {m.split(":")[0] for m in pro["metrics"]} == {"use_case", "type", "difficulty", "specialty"}
    assert {m.split(":")[0] for m in rest["metrics"]} == {"theme", "axis"}
    assert set(board["families"]) == {"theme", "axis", "use_case", "type", "difficulty", "specialty"}

    assert rest["marks"] == []
    assert [(m["kind"], m["detail"]) for m in doctor["marks"]] == [
        ("grader model", f"{MINI} (other runs: gpt-4.1-2025-04-14)")
    ]
    kinds = [m["kind"] for m in pro["marks"]]
    assert kinds == ["grader request", "data", "length adjustment", "not comparable", "not official"]
    official = pro["marks"][-1]["detail"]
    assert "grader model gpt-4.1-2025-04-14 (official: gpt-5.4-2026-03-05)" in official
    assert pro["official_configuration"] is False and pro["official_differences"]
    assert f"grader model differs: gpt-4.1-2025-04-14 (2 runs); {MINI} (1 run)" in board["differences"]


def test_runs_split_evenly_are_all_marked(runs: dict[str, Path], tmp_path: Path) -> None:
    result = leaderboard(runs["rest"], runs["doctor"], "--out", tmp_path / "two.html", "--json")
    assert result.exit_code == 0, result.output
    marks = {Path(run["run"]).name: [m["kind"] for m in run["marks"]] for run in json.loads(result.stdout)["runs"]}
    assert marks == {"rest": ["grader model"], "doctor": ["grader model"]}  # neither is "the usual" grader
    alike = leaderboard(runs["rest"], "--out", tmp_path / "one.html", "--json")
    assert json.loads(alike.stdout)["differences"] == []


def test_markdown_table(runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = leaderboard(runs["pro"], runs["rest"], runs["doctor"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "leaderboard.html").is_file()  # the default page
    assert "leaderboard page: leaderboard.html" in result.stderr and "page" not in result.stdout
    lines = result.stdout.splitlines()
    header = lines.index("| # | run | model | grader | subset | differs | n | score | 95% interval | cost |")
    assert lines[header + 1] == "| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"
    table = [line.split(" | ") for line in lines[header + 2 : header + 5]]
    same = sorted(["rest", "doctor"], key=lambda name: -metrics_of(runs[name])["score"])
    assert [Path(cells[1]).name for cells in table if Path(cells[1]).name != "pro"] == same
    for cells in table:
        metrics = metrics_of(Path(cells[1]))
        assert cells[7].rstrip("†") == f"{metrics['score']:.3f}"
        low, high = task_interval(Path(cells[1])) or (None, None)
        assert cells[8] == f"[{low:.3f}, {high:.3f}]"
        assert cells[9].startswith("$") and cells[9].endswith(" |")  # the whole run's cost, from its usage.json
    row = {Path(cells[1]).name: cells for cells in table}
    assert row["pro"][7].endswith("†") and not row["rest"][7].endswith("†")
    assert row["pro"][5] == "grader request, data, length adjustment, not comparable, not official"
    assert "Runs on different task sets are not comparable: each task set's runs are ranked by themselves." in lines
    assert row["doctor"][5] == "grader model" and row["rest"][5] == ""
    assert "† the headline is the length-adjusted score (center 2000 characters, 0.0147 per 500 characters)" in lines
    assert f"- {runs['doctor']}: grader model: {MINI} (other runs: gpt-4.1-2025-04-14)" in lines
    theme = lines.index("### By theme")
    assert lines[theme + 2] == "| # | run | communication | emergency referrals | global health | hedging |"
    themed = lines[theme + 4 : theme + 6]
    assert {Path(line.split(" | ")[1]).name for line in themed} == {"rest", "doctor"}  # pro has no themes
    hedging = metrics_of(runs["rest"])["theme:hedging"]
    assert any(line.endswith(f" | {hedging:.3f} |") and str(runs["rest"]) in line for line in themed)
    assert "### By axis" in lines and "### By specialty" in lines


def test_page_is_escaped_self_contained_and_opens_in_a_browser(runs: dict[str, Path], tmp_path: Path) -> None:
    odd = tmp_path / "<script>x</script>"
    shutil.copytree(runs["rest"], odd)
    page = tmp_path / "board.html"
    result = leaderboard(runs["pro"], odd, runs["doctor"], "--out", page)
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "<link" not in html
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed")
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "HealthBench leaderboard" in dom and "These runs were not all graded alike" in dom
    assert dom.count('class="mark"') == 1 + 5  # doctor's grader model; pro's five marks
    assert dom.count("<h2>By ") == 6


def test_what_is_not_a_finished_run_is_refused_by_name(runs: dict[str, Path], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = leaderboard(runs["rest"], empty, "--out", tmp_path / "x.html")
    assert result.exit_code == 1 and f"{empty}: not a finished run (run.json is missing)" in result.output

    unscored = tmp_path / "unscored"
    shutil.copytree(runs["rest"], unscored)
    (unscored / "metrics.json").unlink()
    result = leaderboard(unscored, "--out", tmp_path / "x.html")
    assert result.exit_code == 1 and f"{unscored}: not a finished run (metrics.json is missing)" in result.output

    result = leaderboard(runs["rest"], runs["rest"], "--out", tmp_path / "x.html")
    assert result.exit_code == 1 and "given twice" in result.output
    result = leaderboard(tmp_path / "nowhere", "--out", tmp_path / "x.html")
    assert result.exit_code == 2 and "nowhere" in result.output and "does not exist" in result.output
    assert not (tmp_path / "x.html").exists()


def test_failed_and_meta_eval_runs_are_refused(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", rows()[:3])
    replies = {row["prompt_id"]: "Rest." for row in rows()[:3]}
    with FakeOpenAI(fail_always=lambda body: "for case 1" in json.dumps(body)) as failing:
        assert failing.base_url
        result = grade(tmp_path / "failed", ["--data", str(data)], replies, failing.base_url, "--max-attempts", "1")
    assert result.exit_code == 1 and (tmp_path / "failed" / "metrics.json").exists() is False
    result = leaderboard(tmp_path / "failed", "--out", tmp_path / "x.html")
    assert result.exit_code == 1
    assert f"{tmp_path / 'failed'}: not a finished run (1 sample could not be graded)" in result.output

    meta = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(4))
    with FakeOpenAI() as fake:
        assert fake.base_url
        assert meta_eval(meta, tmp_path / "meta", fake.base_url).exit_code == 0
    result = leaderboard(tmp_path / "meta", "--out", tmp_path / "x.html")
    assert result.exit_code == 1
    assert f"{tmp_path / 'meta'}: a meta-eval run measures a grader against physicians, not a model" in result.output
    assert not (tmp_path / "x.html").exists()


def test_an_eval_run_is_listed_under_its_model(runs: dict[str, Path], tmp_path: Path, fake: FakeOpenAI) -> None:
    assert fake.base_url
    data = write_jsonl(tmp_path / "rows.jsonl", rows())
    assert run_eval(data, tmp_path / "eval", fake.base_url).exit_code == 0
    result = leaderboard(tmp_path / "eval", runs["rest"], "--out", tmp_path / "x.html", "--json")
    assert result.exit_code == 0, result.output
    listed = {run["command"]: run for run in json.loads(result.stdout)["runs"]}
    assert listed["eval"]["model"] == "fake-model" and listed["grade"]["model"].endswith("rest.replies.jsonl")
    assert listed["eval"]["score"] == metrics_of(tmp_path / "eval")["score"]
    assert listed["eval"]["marks"] == []  # the same file, graded by grade and by eval
    sha = RunFolder(tmp_path / "eval").require_run().spec.data.sha256
    assert sha is not None
    assert listed["eval"]["subset"] == f"rows.jsonl sha256:{sha[:12]}" and listed["eval"]["data_sha256"] == sha
    page = (tmp_path / "x.html").read_text()
    assert f">rows.jsonl sha256:{sha[:12]}</td>" in page and f"{tmp_path / 'rows.jsonl'} (sha256 {sha})" in page
    assert str(tmp_path / "rows.jsonl") not in result.stdout.split('"data":')[0]  # the table cell is the name


def test_tied_runs_share_a_rank_and_the_next_is_skipped(runs: dict[str, Path], tmp_path: Path) -> None:
    shutil.copytree(runs["rest"], tmp_path / "again")
    result = leaderboard(runs["rest"], tmp_path / "again", runs["doctor"], "--out", tmp_path / "x.html", "--json")
    assert result.exit_code == 0, result.output
    ranked = sorted((run["rank"], Path(run["run"]).name) for run in json.loads(result.stdout)["runs"])
    rest_first = metrics_of(runs["rest"])["score"] > metrics_of(runs["doctor"])["score"]
    assert ranked == ([(1, "again"), (1, "rest"), (3, "doctor")] if rest_first else [
        (1, "doctor"), (2, "again"), (2, "rest")])  # fmt: skip
    table = leaderboard(runs["rest"], tmp_path / "again", runs["doctor"], "--out", tmp_path / "x.html").stdout
    assert "Runs whose scores are equal to the three decimals shown share a rank." in table
    assert "share a rank" not in leaderboard(runs["rest"], runs["doctor"], "--out", tmp_path / "x.html").stdout
