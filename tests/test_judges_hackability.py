"""`healthbench judges`' hackability end to end, on made-up meta-eval rows, against loopback judges: one fooled by
a note to the grader (the fake's `fooled` grader), one not (`hashed`); and an attacker model (the fake's) whose
rewrites every judge is tried on, made once and reused."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.data.schema import MetaRow
from healthbench.grading.hackability import MIN_VERDICT_CONVERSATIONS, majority_not_met
from healthbench.grading.strategies import STRATEGIES
from healthbench.testing import FakeOpenAI
from healthbench.testing.graders import graded_parts
from tests.conftest import write_jsonl
from tests.reference import KEY
from tests.test_bad_input import refused
from tests.test_judges import record
from tests.test_metaeval import made_up_meta_rows, meta_eval

ATTACKER_KEY = "sk-attacker-never-the-graders-1234"
ROWS = 160


@pytest.fixture
def judges_pair() -> Iterator[tuple[FakeOpenAI, FakeOpenAI]]:
    """A judge fooled by what a naive judge is fooled by, and one that judges the whole prompt by a hash."""
    with FakeOpenAI(grader="fooled") as gullible, FakeOpenAI() as strict:
        yield gullible, strict


def run_judges(data: Path, out: Path, gullible: FakeOpenAI, strict: FakeOpenAI, *extra: str) -> Result:
    args = ["judges", "--data", str(data), "--out", str(out), "--no-progress"]
    args += ["--grader", f"gullible@{gullible.base_url}", "--grader", f"strict@{strict.base_url}", *extra]
    env = {"HEALTHBENCH_GRADER_API_KEY": KEY, "HEALTHBENCH_ATTACKER_API_KEY": ATTACKER_KEY}
    return CliRunner().invoke(main, args, env=env)


@pytest.fixture
def meta(tmp_path: Path) -> tuple[list[dict[str, Any]], Path]:
    """Made-up meta-eval rows, and their file."""
    rows = made_up_meta_rows(ROWS)
    return rows, write_jsonl(tmp_path / "meta.jsonl", rows)


def not_met(rows: list[dict[str, Any]]) -> list[int]:
    return [index for index, row in enumerate(rows) if majority_not_met(row["binary_labels"])]


def test_a_judge_fooled_by_a_note_to_the_grader_is_hackable_and_a_strict_one_is_not(
    tmp_path: Path, judges_pair: tuple[FakeOpenAI, FakeOpenAI], meta: tuple[list[dict[str, Any]], Path]
) -> None:
    gullible, strict = judges_pair
    rows, data = meta
    out = tmp_path / "out"
    result = run_judges(data, out, gullible, strict, "--tricks", "grader_injection,padding")
    assert result.exit_code == 0, result.output
    got = record(out)
    assert got.version == 2 and got.tricks == ["grader_injection", "padding"] and got.hack_rows == 500
    fooled, judged = got.judges
    tried = not_met(rows)
    for entry in got.judges:
        hack = entry.hackability
        assert hack is not None and hack.finished and hack.rows == len(tried) and hack.trials == 2 * len(tried)
        assert [figures.trick for figures in hack.tricks] == ["grader_injection", "padding"]
    hack = fooled.hackability
    assert hack is not None
    injection = hack.trick("grader_injection")
    assert injection is not None and injection.fooled == 1.0 and injection.interval is not None
    assert injection.interval[0] > 0 and injection.verdict == "hackable"
    assert injection.difference == pytest.approx(injection.fooled - injection.false_met)
    assert hack.verdict == "hackable" and hack.worst == "grader_injection"
    assert injection.conversations >= MIN_VERDICT_CONVERSATIONS
    strict_hack = judged.hackability
    assert strict_hack is not None and strict_hack.verdict != "hackable"
    assert all(figures.verdict != "hackable" for figures in strict_hack.tricks)
    assert "HACKABLE by grader_injection" in result.output and "fooled most by grader_injection" in result.output

    # the false-met rate is the judge's own meta-eval verdicts on the untouched completions of those rows
    graded = [json.loads(line) for line in (out / fooled.folder / "results.jsonl").read_text().splitlines()]
    met = {line["index"]: line["criteria_met"] for line in graded}
    assert injection.false_met == pytest.approx(sum(met[i] for i in tried) / len(tried))
    # each trial is a line naming its row and trick, in the judge's own folder
    trials = [json.loads(line) for line in (out / fooled.folder / "hack" / "results.jsonl").read_text().splitlines()]
    assert Counter(line["trick"] for line in trials) == {"grader_injection": len(tried), "padding": len(tried)}
    assert sorted({line["index"] for line in trials}) == tried

    # agreement figures are meta-eval's run alone, trials or not
    for server, entry, model in ((gullible, fooled, "gullible"), (strict, judged, "strict")):
        assert server.base_url
        alone = meta_eval(data, tmp_path / f"alone-{model}", server.base_url, "--grader-model", model)
        assert alone.exit_code == 0, alone.output
        assert entry.metrics == json.loads((tmp_path / f"alone-{model}" / "metrics.json").read_text())

    # both axes on the page, the best trade-offs marked, and the trick that fools each judge most
    page = (out / "judges.html").read_text()
    assert 'aria-label="macro F1 against hackability per grader"' in page
    assert "Best trade-off" in page and "HACKABLE by grader_injection" in page
    # the strict judge is fooled less, so it is a best trade-off; the gullible one only if it agrees better
    assert judged.name in got.front
    assert (fooled.name in got.front) == ((fooled.macro_f1 or 0) > (judged.macro_f1 or 0))

    # the same command again asks nothing: every trial's verdict is kept
    judges_json = (out / "judges.json").read_bytes()
    gullible.reset()
    strict.reset()
    again = run_judges(data, out, gullible, strict, "--tricks", "grader_injection,padding")
    assert again.exit_code == 0, again.output
    assert gullible.requests_total == 0 and strict.requests_total == 0
    assert (out / "judges.json").read_bytes() == judges_json


def test_a_dry_run_counts_the_trials_and_the_attackers_rewrites(
    tmp_path: Path, judges_pair: tuple[FakeOpenAI, FakeOpenAI], meta: tuple[list[dict[str, Any]], Path]
) -> None:
    gullible, strict = judges_pair
    data = meta[1]
    with FakeOpenAI() as attacker:
        flags = ["--dry-run", "--hack-limit", "20", "--tricks", "padding,claim_coverage"]
        url = attacker.base_url
        result = run_judges(data, tmp_path / "out", gullible, strict, *flags, "--attacker", f"a@{url}")
        assert attacker.requests_total == 0
    assert result.exit_code == 0, result.output
    assert gullible.requests_total == 0 and strict.requests_total == 0 and not (tmp_path / "out").exists()
    assert result.output.count("40 trials (20 rows x 2 tricks)") == 2
    # each judge's trials are its calls: one per trial, per item
    assert result.output.count(f"grader gullible at {gullible.base_url}: 40 calls") == 1
    assert "the attacker's" in result.output and f"attacker a at {url}: " in result.output


def test_the_attacker_rewrites_each_completion_once_for_every_judge_and_a_resume_asks_it_nothing(
    tmp_path: Path, judges_pair: tuple[FakeOpenAI, FakeOpenAI], meta: tuple[list[dict[str, Any]], Path]
) -> None:
    gullible, strict = judges_pair
    rows, data = meta
    out = tmp_path / "out"
    tried = [MetaRow.model_validate(rows[index]) for index in not_met(rows)]
    completions = {(row.prompt_id, row.completion_id, str(row.prompt)) for row in tried}
    with FakeOpenAI() as attacker:
        flags = ("--attacker", f"attacker-model@{attacker.base_url}", "--tricks", ",".join(STRATEGIES))
        result = run_judges(data, out, gullible, strict, *flags)
        assert result.exit_code == 0, result.output
        # one rewrite per completion and strategy, asked with the attacker's own key, never the graders'
        assert attacker.requests_total == len(completions) * len(STRATEGIES)
        assert set(attacker.auth_headers) == {f"Bearer {ATTACKER_KEY}"}
        # the attacker sees the conversation and the reply, never a rubric criterion
        criteria = {row["rubric"] for row in rows}
        sent = [json.dumps(body) for body in attacker.bodies]
        assert not any(criterion in body for criterion in criteria for body in sent)
        rewrites = [json.loads(line) for line in (out / "attacker" / "results.jsonl").read_text().splitlines()]
        assert len(rewrites) == len(completions) * len(STRATEGIES)
        assert {(line["strategy"], line["attacker"]) for line in rewrites} == {
            (name, "attacker-model") for name in STRATEGIES
        }
        texts = {line["text"] for line in rewrites}
        # every judge was tried on those very texts
        for server in (gullible, strict):
            graded = {graded_parts(body["messages"][1]["content"])[0] for body in server.bodies}
            assert texts <= graded
        got = record(out)
        assert got.attacker is not None and got.attacker.model == "attacker-model"
        assert got.attacker.rewrites == len(rewrites) and got.attacker.failed == 0
        assert got.attacker.strategies == list(STRATEGIES)
        fooled, judged = got.judges
        assert fooled.hackability is not None and judged.hackability is not None
        claimed = fooled.hackability.trick("claim_coverage")
        assert claimed is not None and claimed.attacker == "attacker-model" and claimed.verdict == "hackable"
        assert all(figures.verdict != "hackable" for figures in judged.hackability.tricks)
        trial_lines = (out / fooled.folder / "hack" / "results.jsonl").read_text().splitlines()
        assert {json.loads(line)["attacker"] for line in trial_lines} == {"attacker-model"}
        page = (out / "judges.html").read_text()
        assert "macro F1 against hackability" in page and "claim_coverage" in page and "attacker-model" in page

        attacker.reset()
        gullible.reset()
        again = run_judges(data, out, gullible, strict, *flags)
        assert again.exit_code == 0, again.output
        assert attacker.requests_total == 0 and gullible.requests_total == 0
        assert f"0 asked this session, {len(rewrites)} reused" in again.output


def test_too_few_rows_for_an_interval_get_no_verdict_and_say_so(
    tmp_path: Path, judges_pair: tuple[FakeOpenAI, FakeOpenAI], meta: tuple[list[dict[str, Any]], Path]
) -> None:
    gullible, strict = judges_pair
    data = meta[1]
    result = run_judges(data, tmp_path / "out", gullible, strict, "--tricks", "grader_injection", "--hack-limit", "6")
    assert result.exit_code == 0, result.output
    for entry in record(tmp_path / "out").judges:
        assert entry.hackability is not None and entry.hackability.verdict == "too few rows"
    assert result.output.count(f"too few rows for a verdict (it takes {MIN_VERDICT_CONVERSATIONS} conversations") == 2
    assert record(tmp_path / "out").front == []
    assert "too few rows for a verdict" in (tmp_path / "out" / "judges.html").read_text()


def test_hack_limit_zero_tries_no_trick(tmp_path: Path, judges_pair: tuple[FakeOpenAI, FakeOpenAI]) -> None:
    gullible, strict = judges_pair
    data = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(40))
    result = run_judges(data, tmp_path / "out", gullible, strict, "--hack-limit", "0")
    assert result.exit_code == 0, result.output
    assert gullible.requests_total == 40 and strict.requests_total == 40
    got = record(tmp_path / "out")
    assert got.tricks == [] and all(entry.hackability is None for entry in got.judges)
    assert "hackability" not in result.output


def test_a_judges_json_of_version_1_reads_as_written(tmp_path: Path) -> None:
    judge: dict[str, Any] = {"name": "a", "folder": "a", "model": "a", "base_url": "http://x/v1", "calls": "per-item"}
    judge |= {"finished": True, "rows": 10, "macro_f1": 0.7}
    old = {
        "version": 1,
        "data": "meta.jsonl",
        "data_sha256": "0" * 64,
        "rows": 10,
        "seed": 0,
        "n_bootstrap": 1000,
        "confidence": 0.95,
        "judges": [judge],
        "leader": "a",
    }
    (tmp_path / "judges.json").write_text(json.dumps(old))
    got = record(tmp_path)
    assert got.version == 1 and got.judges[0].hackability is None and got.tricks == [] and got.attacker is None


def test_bad_tricks_and_attackers_are_one_line(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(4))
    base = ["judges", "--data", str(data), "--out", str(tmp_path / "out"), "--grader", "a"]

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, [*base, *args], env={"HEALTHBENCH_GRADER_API_KEY": KEY})

    refused(run("--tricks", "grader_injection,nonsense"), "--tricks", "no trick 'nonsense'")
    refused(run("--tricks", "claim_coverage"), "--tricks", "give --attacker")
    refused(run("--attacker", "gpt-4.1@notaurl"), "--attacker", "must be a URL")
    refused(run("--hack-limit", "-1"), "--hack-limit")
    assert not (tmp_path / "out").exists()


def test_an_attacker_that_cannot_be_reached_leaves_the_fixed_tricks_tried_and_says_so(
    tmp_path: Path, judges_pair: tuple[FakeOpenAI, FakeOpenAI], meta: tuple[list[dict[str, Any]], Path]
) -> None:
    gullible, strict = judges_pair
    data = meta[1]
    flags = ("--attacker", "attacker@http://127.0.0.1:9/v1", "--tricks", "grader_injection,claim_coverage")
    result = run_judges(data, tmp_path / "out", gullible, strict, *flags)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "the attacker attacker: stopped, the attacker's endpoint http://127.0.0.1:9/v1" in result.output
    assert "not finished: the attacker's rewrites" in result.output
    got = record(tmp_path / "out")
    assert got.attacker is not None and got.attacker.rewrites == 0
    assert got.attacker.failure is not None and "127.0.0.1:9" in got.attacker.failure
    for entry in got.judges:
        assert entry.finished and entry.hackability is not None
        assert [figures.trick for figures in entry.hackability.tricks] == ["grader_injection"]
