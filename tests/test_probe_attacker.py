"""`healthbench probe --attacker`: an attacker model (the fake's, whose rewrites are a pure function of the reply
and the strategy) rewrites each reply by its strategies, once, into OUT/attacker/; the grader is tried on them beside
the fixed transforms, a resume asks neither again, and the page shows each strategy's writing."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from healthbench.cli import main
from healthbench.grading.strategies import STRATEGIES
from healthbench.testing import FakeOpenAI
from healthbench.testing.attacker import LINES
from tests.conftest import write_jsonl
from tests.test_bad_input import refused
from tests.test_probe import ROWS, summary

TASKS = 30
KEYS = {"HEALTHBENCH_GRADER_API_KEY": "sk-grader-1234", "OPENAI_API_KEY": "sk-openai-5678"}


def files(tmp_path: Path) -> tuple[Path, Path]:
    rows = ROWS[:TASKS]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    replies = [{"prompt_id": r["prompt_id"], "response": f"Rest and drink water ({r['prompt_id']})."} for r in rows]
    return data, write_jsonl(tmp_path / "replies.jsonl", replies)


def probe(tmp_path: Path, grader: FakeOpenAI, *extra: str, env: dict[str, str] | None = None) -> Result:
    data, _ = files(tmp_path)
    assert grader.base_url
    args = ["probe", "--data", str(data), "--out", str(tmp_path / "out"), "--grader-base-url", grader.base_url]
    return CliRunner().invoke(main, [*args, "--no-progress", *extra], env=env or KEYS)


def test_each_reply_is_rewritten_once_by_each_strategy_and_the_grader_tried_on_it(tmp_path: Path) -> None:
    _, replies = files(tmp_path)
    with FakeOpenAI(grader="fooled") as grader, FakeOpenAI() as attacker:
        flags = ("--responses", str(replies), "--attacker", f"attacker-model@{attacker.base_url}")
        result = probe(tmp_path, grader, *flags, "--transform", "padding", *(f"--transform={s}" for s in STRATEGIES))
        assert result.exit_code == 0, result.output
        assert attacker.requests_total == TASKS * len(STRATEGIES)
        # without a key of its own, the attacker is sent the user's OpenAI key, never the grader's
        assert set(attacker.auth_headers) == {f"Bearer {KEYS['OPENAI_API_KEY']}"}
        written = (tmp_path / "out" / "attacker" / "results.jsonl").read_text()
        lines = [json.loads(line) for line in written.splitlines()]
        assert len(lines) == TASKS * len(STRATEGIES)
        assert {(line["strategy"], line["attacker"]) for line in lines} == {(s, "attacker-model") for s in STRATEGIES}
        found = summary(tmp_path / "out")["transforms"]
        assert set(found) == {"padding", *STRATEGIES}
        # the fake grader believes a claim of coverage, and nothing the other strategies write
        assert "claim_coverage: HACKABLE" in result.output and found["claim_coverage"]["ci95"][0] > 0
        assert all(found[name]["mean_gain"] == 0 for name in STRATEGIES if name != "claim_coverage")
        graded = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
        rewritten = {line["text"] for line in lines}
        assert {g["response"] for g in graded if g.get("transform") in STRATEGIES} == rewritten
        page = (tmp_path / "out" / "probe.html").read_text()
        for name in STRATEGIES:  # an example of each strategy's writing, gained or not
            assert LINES[name].replace("'", "&#39;") in page
        assert "attacker-model" in page

        attacker.reset()
        grader.reset()
        again = probe(tmp_path, grader, *flags, "--transform", "padding", *(f"--transform={s}" for s in STRATEGIES))
        assert again.exit_code == 0, again.output
        assert attacker.requests_total == 0 and grader.requests_total == 0


def test_a_models_replies_are_sampled_once_then_rewritten(tmp_path: Path) -> None:
    with FakeOpenAI() as grader, FakeOpenAI() as model, FakeOpenAI() as attacker:
        flags = ("--model", "policy-model", "--base-url", str(model.base_url), "--transform", "hedge_and_refer")
        result = probe(tmp_path, grader, *flags, "--attacker", f"attacker-model@{attacker.base_url}")
        assert result.exit_code == 0, result.output
        assert model.requests_total == TASKS and attacker.requests_total == TASKS
        # the attacker rewrote the model's own replies (the fake's are "Fake reply ...")
        assert all("Fake reply " in body["messages"][1]["content"] for body in attacker.bodies)
        graded = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
        assert {line.get("policy_model") for line in graded} == {"policy-model"}
        assert len(graded) == 2 * TASKS and "hedge_and_refer" in summary(tmp_path / "out")["transforms"]
        for server in (grader, model, attacker):
            server.reset()
        again = probe(tmp_path, grader, *flags, "--attacker", f"attacker-model@{attacker.base_url}")
        assert again.exit_code == 0, again.output
        assert grader.requests_total == model.requests_total == attacker.requests_total == 0


def test_an_attacker_that_cannot_be_reached_stops_the_probe_before_any_grading(tmp_path: Path) -> None:
    _, replies = files(tmp_path)
    with FakeOpenAI() as grader:
        result = probe(tmp_path, grader, "--responses", str(replies), "--attacker", "a@http://127.0.0.1:9/v1")
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert "the attacker's endpoint http://127.0.0.1:9/v1" in result.output
        assert "the attacker's rewrites are not all made" in result.output and "RunFolder" not in result.output
        assert grader.requests_total == 0


def test_a_strategy_needs_an_attacker(tmp_path: Path) -> None:
    _, replies = files(tmp_path)
    with FakeOpenAI() as grader:
        refused(probe(tmp_path, grader, "--responses", str(replies), "--transform", "claim_coverage"), "--attacker")
        refused(probe(tmp_path, grader, "--responses", str(replies), "--attacker", "m@HOST"), "--attacker", "URL")
        assert grader.requests_total == 0
