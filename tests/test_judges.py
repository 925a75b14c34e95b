"""`healthbench judges`: several graders' meta-evaluations of the same made-up physician-labelled rows, against two
loopback graders that judge differently; each grader's figures are `meta-eval`'s for that grader alone."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.cli.judges import folder_name, parse_grader
from healthbench.cli.models import shown_url
from healthbench.errors import DataError
from healthbench.reporting.judges_page import verdict
from healthbench.runs.folder import RunFolder
from healthbench.runs.judges import ITEMS_PER_REWARD, Difference, JudgeEntry, JudgesRecord
from healthbench.testing import FakeOpenAI
from tests.conftest import write_jsonl
from tests.reference import KEY
from tests.test_bad_input import refused
from tests.test_metaeval import made_up_meta_rows, meta_eval

OTHER_KEY = "sk-judge-b-never-written-9876543210"
PRICES = {"judge-a": {"input": 1.0, "cached_input": 0.25, "output": 4.0}}


@pytest.fixture
def graders() -> Iterator[tuple[FakeOpenAI, FakeOpenAI]]:
    """Two loopback graders: one whose verdict is a hash of the prompt, one a seeded coin."""
    with FakeOpenAI() as hashed, FakeOpenAI(grader="coin", seed=3) as coin:
        yield hashed, coin


def judges(data: Path, out: Path, a: FakeOpenAI, b: FakeOpenAI, *extra: str, prices: Path | None = None) -> Result:
    args = ["judges", "--data", str(data), "--out", str(out), "--no-progress"]
    args += ["--grader", f"judge-a@{a.base_url}", "--grader", f"judge-b@{b.base_url}"]
    args += ["--grader-key-env", "judge-b=JUDGE_B_KEY", *extra]
    if prices is not None:
        args += ["--prices", str(prices)]
    env = {"HEALTHBENCH_GRADER_API_KEY": KEY, "JUDGE_B_KEY": OTHER_KEY}
    return CliRunner().invoke(main, args, env=env)


def record(out: Path) -> JudgesRecord:
    found = RunFolder(out).read(JudgesRecord)
    assert found is not None
    return found


def metrics(out: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((out / "metrics.json").read_text())
    return value


def every_file(out: Path) -> str:
    return "".join(path.read_bytes().decode("utf-8", "replace") for path in out.rglob("*") if path.is_file())


def test_each_grader_is_meta_eval_alone_and_a_rerun_asks_nothing(
    tmp_path: Path, graders: tuple[FakeOpenAI, FakeOpenAI]
) -> None:
    a, b = graders
    data = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(120))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    result = judges(data, tmp_path / "out", a, b, prices=prices)
    assert result.exit_code == 0, result.output
    got = record(tmp_path / "out")
    assert [(j.model, j.base_url, j.calls, j.rows) for j in got.judges] == [
        ("judge-a", a.base_url, "per-item", 120),
        ("judge-b", b.base_url, "per-item", 120),
    ]
    # each grader got its own key, and no key is in any file written
    assert set(a.auth_headers) == {f"Bearer {KEY}"} and set(b.auth_headers) == {f"Bearer {OTHER_KEY}"}
    written = every_file(tmp_path / "out")
    assert KEY not in written and OTHER_KEY not in written

    # The same rows through meta-eval, one grader at a time: the same figures under the same names.
    for server, entry, model in ((a, got.judges[0], "judge-a"), (b, got.judges[1], "judge-b")):
        alone = tmp_path / f"alone-{model}"
        assert server.base_url
        ran = meta_eval(data, alone, server.base_url, "--grader-model", model)
        assert ran.exit_code == 0, ran.output
        expected = metrics(alone)
        assert entry.metrics is not None and entry.finished
        f1_keys = [key for key in expected if "f1" in key]
        assert f1_keys and {key: entry.metrics[key] for key in f1_keys} == {key: expected[key] for key in f1_keys}
        assert entry.metrics == expected
        assert entry.macro_f1 == expected["pairwise_model_f1_balanced"]
        assert entry.physicians_f1 == expected["pairwise_physician_f1_balanced"]
        for category in entry.categories:
            assert category.macro_f1 == expected.get(f"{category.category}: pairwise_model_f1_balanced")
        # its folder is a meta-eval run folder of its own
        assert metrics(tmp_path / "out" / entry.folder) == expected
    hashed, coin = got.judges
    assert hashed.metrics != coin.metrics  # the two judge differently
    for entry in got.judges:
        assert entry.interval is not None and entry.interval[0] <= (entry.macro_f1 or 0) <= entry.interval[1]
        assert entry.latency is not None and entry.latency.n == 120 and (entry.latency.p50 or 0) > 0
        assert (entry.latency.p50 or 0) <= (entry.latency.p95 or 0)
        assert entry.failed_rows == 0 and entry.retried_answers == 0
    assert hashed.cost is not None and coin.cost is not None
    assert hashed.cost.calls == 120 and hashed.cost.cost_usd is not None and coin.cost.usd_per_1000_rewards is None
    assert hashed.cost.usd_per_1000_rewards == pytest.approx(hashed.cost.cost_usd * 1000 * ITEMS_PER_REWARD / 120)
    assert got.leader in {hashed.name, coin.name}
    [difference] = got.differences
    other = hashed if got.leader == coin.name else coin
    assert difference.name == other.name
    assert difference.difference == pytest.approx((other.macro_f1 or 0) - max(hashed.macro_f1 or 0, coin.macro_f1 or 0))
    assert "leader" in result.output and "macro F1" in result.output
    page = (tmp_path / "out" / "judges.html").read_text()
    assert "judge-a" in page and "judge-b" in page and "physicians" in page
    report = CliRunner().invoke(main, ["report", str(tmp_path / "out" / hashed.folder)])
    assert report.exit_code == 0, report.output

    judges_bytes = (tmp_path / "out" / "judges.json").read_bytes()
    a.reset()
    b.reset()
    again = judges(data, tmp_path / "out", a, b, prices=prices)
    assert again.exit_code == 0, again.output
    assert a.requests_total == 0 and b.requests_total == 0
    assert again.output.count("(120 verdicts reused)") == 2
    # the same record: latency kept with each verdict, so a resumed run reports the calls as they were timed
    assert (tmp_path / "out" / "judges.json").read_bytes() == judges_bytes


def test_limit_and_both_call_modes(tmp_path: Path, graders: tuple[FakeOpenAI, FakeOpenAI]) -> None:
    a, b = graders
    rows = made_up_meta_rows(60)
    data = write_jsonl(tmp_path / "meta.jsonl", rows)
    result = judges(data, tmp_path / "out", a, b, "--limit", "20", "--grader-calls", "both")
    assert result.exit_code == 0, result.output
    got = record(tmp_path / "out")
    assert got.rows == 20 and got.limit == 20
    assert [(j.model, j.calls) for j in got.judges] == [
        ("judge-a", "per-item"),
        ("judge-a", "per-reply"),
        ("judge-b", "per-item"),
        ("judge-b", "per-reply"),
    ]
    chosen = random.Random(0).sample(rows, 20)
    for entry in got.judges:
        folder = tmp_path / "out" / entry.folder
        assert entry.folder.endswith(f"/{entry.calls}")
        lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
        graded = [(r["prompt_id"], r["completion_id"], r["rubric"]) for r in sorted(lines, key=lambda r: r["index"])]
        assert graded == [(r["prompt_id"], r["completion_id"], r["rubric"]) for r in chosen]
    # per reply, one call judges a completion's rows: fewer calls than rows, each call timed once
    per_reply = got.judges[1]
    assert per_reply.cost is not None and per_reply.latency is not None
    assert per_reply.cost.calls == per_reply.latency.n < 20 and per_reply.completions < 20
    # a limit that small: the intervals are wide
    assert all(j.interval is not None and j.interval[1] - j.interval[0] > 0.1 for j in got.judges)

    # the per-item run with --limit is meta-eval's with the same --limit
    assert a.base_url
    alone = meta_eval(data, tmp_path / "alone", a.base_url, "--grader-model", "judge-a", "--limit", "20")
    assert alone.exit_code == 0, alone.output
    assert got.judges[0].metrics == metrics(tmp_path / "alone")


def test_graders_the_rows_cannot_tell_apart_are_said_to_be(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(40))
    with FakeOpenAI() as a, FakeOpenAI() as b:  # both judge by a hash of the prompt: the same verdicts
        result = judges(data, tmp_path / "out", a, b, "--limit", "20")
    assert result.exit_code == 0, result.output
    got = record(tmp_path / "out")
    assert got.leader == got.judges[0].name and got.undecided == [got.judges[1].name]
    [difference] = got.differences
    assert difference.difference == 0 and difference.interval == (0.0, 0.0) and not difference.decided
    assert "Too close to choose" in result.output
    assert "Too close to choose" in (tmp_path / "out" / "judges.html").read_text()


def test_graders_that_fail_are_named_and_the_others_finish(tmp_path: Path, fake: FakeOpenAI) -> None:
    rows = made_up_meta_rows(20)
    data = write_jsonl(tmp_path / "meta.jsonl", rows)
    failing = sum(row["rubric"].endswith("4") for row in rows)
    args = ["judges", "--data", str(data), "--out", str(tmp_path / "out"), "--no-progress", "--max-attempts", "2"]
    args += ["--grader", "gone@http://127.0.0.1:9/v1", "--grader", f"judge-a@{fake.base_url}"]
    args += ["--grader-key-env", "judge-a="]  # a local server's: no key at all
    with FakeOpenAI(fail_always=lambda body: "warning sign 4" in body["messages"][1]["content"]) as flaky:
        result = CliRunner().invoke(
            main, [*args, "--grader", f"flaky@{flaky.base_url}"], env={"HEALTHBENCH_GRADER_API_KEY": KEY}
        )
    assert result.exit_code == 1 and "Traceback" not in result.output
    got = record(tmp_path / "out")
    gone, judged, half = got.judges
    assert not gone.finished and gone.failure and "127.0.0.1:9" in gone.failure and gone.metrics is None
    assert not half.finished and half.failed_rows == failing > 0 and half.rows == 20 - failing
    assert half.metrics is None and half.macro_f1 is None
    assert judged.finished and got.leader == judged.name and got.differences == []
    assert fake.auth_headers and set(fake.auth_headers) == {None}
    assert set(flaky.auth_headers) == {f"Bearer {KEY}"}
    assert "gone@http://127.0.0.1:9/v1: stopped" in result.output
    # where a figure would be, a grader that failed reads "failed", never "undefined"
    shown = [line.split() for line in result.output.splitlines() if line.startswith(("gone@", "flaky@"))]
    assert [cells[1] for cells in shown] == ["failed", "failed"]
    assert "undefined" not in result.output
    assert f"not finished: {failing} rows failed" in result.output
    assert "run the same command again to finish" in result.output
    page = (tmp_path / "out" / "judges.html").read_text()
    assert "stopped: the grader&#39;s endpoint" in page and f"not finished: {failing} rows failed" in page
    assert page.count('<td class="r">failed</td>') == 2


def test_judges_json_of_another_version_is_refused(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    for version in (3, "1"):
        (tmp_path / "judges.json").write_text(json.dumps({"version": version}))
        with pytest.raises(DataError, match=rf"judges\.json of version {version!r}, which this release does not read"):
            folder.read(JudgesRecord)
    (tmp_path / "judges.json").write_text(json.dumps({"version": 1, "data": "x"}))
    with pytest.raises(DataError, match=r"judges\.json: field data_sha256: Field required"):
        folder.read(JudgesRecord)


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(4))
    base = ["judges", "--data", str(data), "--out", str(tmp_path / "out")]

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(main, [*base, *args], env={"HEALTHBENCH_GRADER_API_KEY": KEY} | (env or {}))

    refused(run(), "--grader MODEL[@BASE_URL]")
    refused(run("--grader", "qwen3@localhost:8000/v1"), "http:// or https://")
    refused(run("--grader", "gpt-4.1@notaurl"), "'gpt-4.1@notaurl'", "must be a URL")
    refused(run("--grader", "a", "--drop", "b"), "--drop", "'b' names no grader")
    refused(run("--grader", "@http://127.0.0.1:8000/v1"), "no model")
    refused(run("--grader", "qwen3@http://"), "names no host")
    refused(run("--grader", "a", "--grader", "a"), "same grader")
    refused(run("--grader", "a", "--grader-key-env", "b=B_KEY"), "'b' names no --grader")
    refused(run("--grader", "a", "--grader-key-env", "a"), "MODEL=VARIABLE")
    refused(run("--grader", "a", "--grader-key-env", "a=NOT_SET_ANYWHERE"), "NOT_SET_ANYWHERE", "is not set")
    refused(run("--grader", "a", "--grader-calls", "sometimes"), "--grader-calls")
    assert not (tmp_path / "out").exists()


def test_grader_names_and_folders() -> None:
    assert parse_grader("gpt-4.1-mini") == parse_grader("gpt-4.1-mini")
    assert parse_grader("gpt-4.1-mini").base_url is None
    choice = parse_grader("Qwen/Qwen3-32B@http://127.0.0.1:8000/v1")
    assert (choice.model, choice.base_url) == ("Qwen/Qwen3-32B", "http://127.0.0.1:8000/v1")
    assert folder_name(choice) == "Qwen_Qwen3-32B_127.0.0.1-8000_v1"
    # a model name may hold an @ that names no endpoint (Vertex's claude-...@20240620)
    assert parse_grader("claude-sonnet@20240620").model == "claude-sonnet@20240620"
    # a scheme in any case is a scheme: the same endpoint, and the same grader, as in lower case
    shouted = parse_grader("Qwen/Qwen3-32B@HTTP://127.0.0.1:8000/v1")
    assert (shouted.model, shouted.base_url) == ("Qwen/Qwen3-32B", "http://127.0.0.1:8000/v1")
    assert folder_name(shouted) == folder_name(choice)
    assert shown_url("https://user:secret@example.com:8443/v1") == "https://example.com:8443/v1"
    # a pool of servers of one judge model (issue 43): comma-separated after the @, each a URL
    pool = parse_grader("Qwen/Qwen3-32B@http://127.0.0.1:8000/v1, HTTP://127.0.0.1:8001/v1")
    assert pool.base_url == "http://127.0.0.1:8000/v1,http://127.0.0.1:8001/v1"
    assert folder_name(pool) == "Qwen_Qwen3-32B_127.0.0.1-8000_v1-pool2"
    assert shown_url("http://u:p@a:1/v1,http://b:2/v1") == "http://a:1/v1,http://b:2/v1"
    with pytest.raises(click.BadParameter, match="'notaurl' names no host"):
        parse_grader("Qwen/Qwen3-32B@http://127.0.0.1:8000/v1,notaurl")


def test_the_verdict_says_what_the_rows_can_tell() -> None:
    def entry(name: str, f1: float | None, finished: bool = True) -> JudgeEntry:
        return JudgeEntry(
            name=name,
            folder=name,
            model=name,
            base_url="http://127.0.0.1:8000/v1",
            calls="per-item",
            finished=finished,
            rows=10,
            macro_f1=f1,
        )

    def judged(*entries: JudgeEntry, leader: str | None = None, differences: tuple[Difference, ...] = ()) -> str:
        return verdict(
            JudgesRecord(
                data="d",
                data_sha256="0" * 64,
                rows=10,
                seed=0,
                n_bootstrap=1000,
                confidence=0.95,
                judges=list(entries),
                leader=leader,
                differences=list(differences),
            )
        )

    assert judged(entry("a", None, finished=False)) == "No grader finished: nothing to choose between yet."
    assert "is defined" in judged(entry("a", None))
    assert judged(entry("a", 0.7), entry("b", None, finished=False), leader="a").startswith("Only a finished")
    apart = Difference(name="b", difference=-0.1, interval=(-0.15, -0.05), decided=True)
    assert judged(entry("a", 0.7), entry("b", 0.6), leader="a", differences=(apart,)).startswith("a agrees")
    close = Difference(name="b", difference=-0.01, interval=(-0.05, 0.03), decided=False)
    said = judged(entry("a", 0.7), entry("b", 0.69), leader="a", differences=(close,))
    assert said.startswith("Too close to choose") and "from b," in said


def test_a_rerun_keeps_every_grader_measured_unless_dropped(
    tmp_path: Path, graders: tuple[FakeOpenAI, FakeOpenAI]
) -> None:
    a, b = graders
    data = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(40))
    out = tmp_path / "out"
    assert judges(data, out, a, b, "--limit", "20").exit_code == 0
    both = record(out)
    env = {"HEALTHBENCH_GRADER_API_KEY": KEY}
    base = ["judges", "--data", str(data), "--out", str(out), "--no-progress", "--limit", "20"]
    b.reset()
    # judge-b alone again: judge-a, measured before, is kept as its folder holds it, in its place, and said to be
    again = CliRunner().invoke(main, [*base, "--grader", f"judge-b@{b.base_url}"], env=env | {"JUDGE_B_KEY": OTHER_KEY})
    assert again.exit_code == 0, again.output
    assert b.requests_total == 0  # judge-b resumed: nothing asked again
    kept = record(out)
    assert [j.name for j in kept.judges] == [j.name for j in both.judges]
    assert kept.judges == both.judges and kept.differences == both.differences
    assert f"kept from {out / 'judges.json'}, not measured again: judge-a@{a.base_url}" in again.output
    assert f"judge-a@{a.base_url}" in (out / "judges.html").read_text()
    # other rows cannot be set beside the kept grader's
    other = CliRunner().invoke(main, [*base[:-1], "10", "--grader", f"judge-b@{b.base_url}"], env=env)
    refused(other, "measured on other rows", "--drop")
    # --drop leaves it out of judges.json and the page; its folder stays
    dropped = CliRunner().invoke(
        main, [*base, "--grader", f"judge-b@{b.base_url}", "--grader-key-env", "judge-b=", "--drop", "judge-a"], env=env
    )
    assert dropped.exit_code == 0, dropped.output
    assert [j.model for j in record(out).judges] == ["judge-b"]
    assert "judge-a" not in (out / "judges.html").read_text()
    assert (out / both.judges[0].folder / "metrics.json").exists()


def test_a_resume_refused_names_the_default_as_the_default(tmp_path: Path, fake: FakeOpenAI) -> None:
    data = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(8))
    base = ["judges", "--data", str(data), "--out", str(tmp_path / "out"), "--no-progress"]
    base += ["--grader", f"judge-a@{fake.base_url}"]
    env = {"HEALTHBENCH_GRADER_API_KEY": KEY}
    assert CliRunner().invoke(main, [*base, "--grader-max-output-tokens", "4096"], env=env).exit_code == 0
    said = refused(CliRunner().invoke(main, base, env=env), "other settings", "--out")
    assert "(unset)" not in said
    assert '"max_output_tokens": 4096' in said and "-> the default, the reference's" in said
    assert '"max_output_tokens": 2048' in said
    said = refused(CliRunner().invoke(main, [*base, "--grader-calls", "per-reply"], env=env))
    assert 'grader_calls: the default, "per-item" -> "per-reply"' in said
    assert "per_reply_template_sha256: none (the default: graded per-item) -> " in said
