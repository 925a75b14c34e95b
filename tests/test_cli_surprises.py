"""Small things a newcomer meets, each the way they would expect: `download --subset`, a `--limit` past the
rows said on stderr, and no command's help describing a flag it does not take."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthbench.cli import main
from healthbench.data.professional import PROFESSIONAL_FILENAME
from tests.conftest import make_row, write_jsonl
from tests.test_baseline import made_up_rows as baseline_rows
from tests.test_metaeval import made_up_meta_rows
from tests.test_professional_runs import pro_row


def test_download_takes_subset_flags_as_well_as_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_jsonl(tmp_path / PROFESSIONAL_FILENAME, [pro_row(0)])
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(tmp_path))
    fetched = CliRunner().invoke(main, ["download", "--subset", "professional", "professional"])
    assert fetched.exit_code == 0, fetched.output
    assert fetched.output == f"professional: {tmp_path / PROFESSIONAL_FILENAME}\n"  # named twice, fetched once
    unknown = CliRunner().invoke(main, ["download", "--subset", "nope"])
    assert unknown.exit_code == 2 and "'nope' is not one of" in unknown.output
    helped = CliRunner().invoke(main, ["download", "--help"])
    assert "--subset [full|hard|consensus|professional|meta]" in helped.output


def dry_run(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out"), "--dry-run"])
    return result.exit_code, result.stdout, result.stderr


def test_a_limit_past_the_rows_is_said_in_one_line(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [make_row(f"t{i}") for i in range(5)])
    code, out, err = dry_run(tmp_path, "eval", "--model", "m", "--data", str(data), "--limit", "6")
    assert code == 0 and "5 samples of 5 tasks" in out
    assert err == "healthbench: --limit 6 is more than the 5 tasks in the data; running all 5\n"
    code, out, err = dry_run(tmp_path, "eval", "--model", "m", "--data", str(data), "--limit", "5")
    assert code == 0 and err == ""  # all of them, as asked: nothing to say

    physicians = write_jsonl(tmp_path / "physicians.jsonl", baseline_rows())
    code, out, err = dry_run(tmp_path, "baseline", "--group", "2", "--data", str(physicians), "--limit", "500")
    assert code == 0
    [line] = err.splitlines()
    assert re.fullmatch(
        r"healthbench: --limit 500 is more than the (\d+) Group 2 physician ideal completions in the data; "
        r"running all \1",
        line,
    )

    meta = write_jsonl(tmp_path / "meta.jsonl", made_up_meta_rows(7))
    code, out, err = dry_run(tmp_path, "meta-eval", "--data", str(meta), "--limit", "8")
    assert code == 0 and err == "healthbench: --limit 8 is more than the 7 rows in the data; running all 7\n"


@pytest.mark.parametrize("command", ["report", "compare", "batches", "leaderboard"])
def test_help_of_commands_without_subset_never_describes_it(command: str) -> None:
    helped = CliRunner().invoke(main, [command, "--help"])
    assert helped.exit_code == 0
    assert ("--subset professional" in helped.output) is False
    if command == "report":
        assert "[default: the run's]" in helped.output


def test_grading_help_names_professional_by_file() -> None:
    helped = CliRunner().invoke(main, ["grade", "--help"], terminal_width=200)
    assert "a Professional file is graded as --subset professional is" in " ".join(helped.output.split())


def test_serve_help_says_the_slow_start_the_pace_has() -> None:
    # It said "one grader call, then more with each answer" after the pace's first window had grown to ten, then
    # twenty: the help says the window and the growth the pace has.
    from healthbench.api.pacing.pacer import _GROW, FIRST_WINDOW

    helped = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200)
    said = " ".join(helped.output.split())
    words = {2: "two", 10: "ten", 20: "twenty"}
    assert f"{words[FIRST_WINDOW]} grader calls, then {words[_GROW]} more with each answer" in said
    assert "one grader call" not in said
