"""A judge pool behind a real router, as users deploy one (issue 43): `sglang-router` in front of two fake judges
(`tests.judgerouter`), and `healthbench grade` run as a user runs it, with `--grader-base-url` at the router. Skipped
where the router is not installed, except where HEALTHBENCH_REQUIRE_ROUTER is set (CI), which fails instead."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from healthbench.testing import FakeOpenAI
from tests.conftest import write_jsonl
from tests.judgerouter import Router, sglang_router
from tests.reference import KEY
from tests.test_probe import made_up_rows

if importlib.util.find_spec("sglang_router") is None:
    if os.environ.get("HEALTHBENCH_REQUIRE_ROUTER"):
        pytest.fail("sglang-router is not installed: `bash scripts/dev test` installs it", pytrace=False)
    pytest.skip("sglang-router is not installed (`bash scripts/dev test` installs it)", allow_module_level=True)

ROWS = made_up_rows(8)
ITEMS = sum(len(row["rubrics"]) for row in ROWS)
# The bound of each wait on a grade, generous for a loaded 2-core machine: a bound, not a timing.
GRADE_S = 120.0
# What the grade must not inherit: a router in front of self-hosted judges needs no key, and none is sent.
GRADER_VARIABLES = ("OPENAI_API_KEY", "HEALTHBENCH_GRADER_API_KEY", "CHAT_API_KEY", "HEALTHBENCH_GRADER_BASE_URL")
# The router's settings a pool of judges wants (docs/deploy.md): a judge that stops answering is taken out after one
# failed health check a second or three failed calls, not after three checks a minute apart or ten calls (the
# defaults, for GPU servers that take minutes to start).
FLAGS = (
    "--policy", "cache_aware", "--cache-threshold", "0.1",
    "--health-check-interval-secs", "1", "--health-failure-threshold", "1", "--cb-failure-threshold", "3",
)  # fmt: skip


@pytest.fixture
def judges() -> Iterator[list[FakeOpenAI]]:
    """Two fake judges, stopped at the end (a test may stop one sooner: stopping twice is a no-op)."""
    started: list[FakeOpenAI] = []
    try:
        for _ in range(2):
            server = FakeOpenAI()
            server.start()
            started.append(server)
        yield started
    finally:
        for server in started:
            server.stop()


def urls(judges: list[FakeOpenAI]) -> list[str]:
    """The started `judges`' base URLs."""
    return [server.base_url for server in judges if server.base_url]


@pytest.fixture
def router(judges: list[FakeOpenAI], tmp_path: Path) -> Iterator[Router]:
    """sglang-router in front of `judges`, once it has registered both; killed at the end whatever happens."""
    with sglang_router(urls(judges), tmp_path / "router.log", *FLAGS) as running:
        yield running


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The made-up rows and a reply to each, written once for the module's tests."""
    folder = tmp_path_factory.mktemp("rows")
    data = write_jsonl(folder / "rows.jsonl", ROWS)
    replies = [{"prompt_id": r["prompt_id"], "response": f"Rest, and drink water ({r['prompt_id']})."} for r in ROWS]
    return data, write_jsonl(folder / "replies.jsonl", replies)


def grade_command(files: tuple[Path, Path], out: Path, base_url: str) -> list[str]:
    """`healthbench grade` of `files` into `out` with the grader at `base_url`, as a user types it."""
    data, replies = files
    return [
        sys.executable, "-m", "healthbench", "grade", "--data", str(data), "--responses", str(replies),
        "--out", str(out), "--grader-base-url", base_url, "--no-progress",
    ]  # fmt: skip


def grade_env(key: str | None = None) -> dict[str, str]:
    """This environment without grader settings (what a user pointing grade at a self-hosted pool has), and with
    `key` as the grader key if given."""
    env = {k: v for k, v in os.environ.items() if k not in GRADER_VARIABLES}
    return env if key is None else {**env, "HEALTHBENCH_GRADER_API_KEY": key}


def grade(
    files: tuple[Path, Path], out: Path, base_url: str, key: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `grade_command` to its end (within GRADE_S)."""
    command = grade_command(files, out, base_url)
    return subprocess.run(command, env=grade_env(key), capture_output=True, text=True, timeout=GRADE_S)


def verdicts(out: Path) -> dict[str, list[bool]]:
    """Each task's verdicts, item by item, from a run's results."""
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {r["prompt_id"]: [item["criteria_met"] for item in r["rubric_items"]] for r in results}


@pytest.fixture(scope="module")
def reference(files: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same grade straight against one fake judge, graded once for the module's tests."""
    out = tmp_path_factory.mktemp("reference") / "out"
    with FakeOpenAI() as server:
        assert server.base_url
        done = grade(files, out, server.base_url)
        assert done.returncode == 0, done.stderr
        assert server.requests_total == ITEMS
    return out


def assert_same_grades(out: Path, reference: Path) -> None:
    assert json.loads((out / "metrics.json").read_text()) == json.loads((reference / "metrics.json").read_text())
    assert verdicts(out) == verdicts(reference)


def grader_prompts(server: FakeOpenAI) -> set[str]:
    """The grader prompts `server` was sent."""
    return {json.dumps(body["messages"]) for body in server.bodies}


def serving(judges: list[FakeOpenAI], text: str) -> set[int]:
    """The indexes of the judges sent a grader prompt that holds `text`."""
    return {i for i, server in enumerate(judges) if any(text in prompt for prompt in grader_prompts(server))}


def test_grade_through_sglang_router_grades_as_one_judge_does(
    files: tuple[Path, Path], judges: list[FakeOpenAI], router: Router, reference: Path, tmp_path: Path
) -> None:
    done = grade(files, tmp_path / "routed", router.base_url)
    assert done.returncode == 0, done.stderr + router.tail()
    assert_same_grades(tmp_path / "routed", reference)
    assert all(server.requests_total > 0 for server in judges), [s.requests_total for s in judges]
    assert sum(server.requests_total for server in judges) == ITEMS  # nothing asked twice
    assert {header for server in judges for header in server.auth_headers} == {None}  # no key, none needed
    # Cache-aware routing at `--cache-threshold 0.1` keeps a reply's items, which share its conversation, on one judge.
    served_by = [serving(judges, row["prompt"][0]["content"]) for row in ROWS]
    assert all(len(servers) == 1 for servers in served_by), served_by


def test_a_router_with_a_key_wants_it_and_passes_it_on(
    files: tuple[Path, Path], judges: list[FakeOpenAI], reference: Path, tmp_path: Path
) -> None:
    with sglang_router(urls(judges), tmp_path / "router.log", *FLAGS, key=KEY) as router:
        refused = grade(files, tmp_path / "refused", router.base_url)
        keyed = grade(files, tmp_path / "keyed", router.base_url, KEY)
    # Without the key the router refuses every call (HTTP 401), none reaching a judge, and grade stops at once with
    # one line and no score: waiting cannot cure a refusal.
    assert refused.returncode == 1, refused.stderr + router.tail()
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"Error: stopped, the grader's endpoint {router.base_url} refused a request (HTTP 401"), line
    assert keyed.returncode == 0, keyed.stderr + router.tail()
    assert_same_grades(tmp_path / "keyed", reference)
    # The judges (vLLM's `--api-key` takes the same key) are sent it by the router, and only the keyed grade's calls.
    assert {header for server in judges for header in server.auth_headers} == {f"Bearer {KEY}"}
    assert sum(server.requests_total for server in judges) == ITEMS
    assert KEY not in keyed.stdout + keyed.stderr + refused.stdout + refused.stderr


@pytest.mark.parametrize("when", ["mid-run", "before the run"])
def test_a_judge_that_dies_is_routed_around(
    when: str, files: tuple[Path, Path], judges: list[FakeOpenAI], router: Router, reference: Path, tmp_path: Path
) -> None:
    dying, other = judges
    # The dying judge holds every call it is given (recorded, never answered) until it stops, so that mid-run it dies
    # with calls in flight: the run cannot have ended before.
    dying.latency = GRADE_S
    if when == "before the run":
        dying.stop()
    command = grade_command(files, tmp_path / "routed", router.base_url)
    process = subprocess.Popen(command, env=grade_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if when == "mid-run":
            deadline = time.monotonic() + GRADE_S
            while not dying.bodies and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)  # polling for the first call the dying judge holds, not timing anything
            assert dying.bodies, "the router sent the dying judge no call"
            held = grader_prompts(dying)
            dying.stop()
        _, errors = process.communicate(timeout=GRADE_S)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, errors + router.tail()
    assert_same_grades(tmp_path / "routed", reference)
    # Every call answered once, by the judge left: what the dead one held too, and none twice.
    assert other.requests_total == ITEMS
    if when == "mid-run":
        assert held <= grader_prompts(other)
