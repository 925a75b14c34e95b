"""Shared test helpers and fixtures: rows in the official schema, the sample file when present, fake endpoints (one
per test, one per module, a trainer's grader, several with a batch client), a real Redis, and a served
`healthbench serve` a module's tests share (configured by the module's `ROWS` and `SERVING`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from healthbench.testing import FakeOpenAI
from tests.batchclient import Client, StartFake
from tests.redisserver import RedisServer, redis_server

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

# CI clones the repository beside a copy of shared/, so the sample sits at <clone>/../shared/data/.
SAMPLE = Path(
    os.environ.get(
        "HEALTHBENCH_SAMPLE", Path(__file__).resolve().parents[2] / "shared" / "data" / "healthbench_sample.jsonl"
    )
)


def make_row(
    prompt_id: str = "p1",
    *,
    prompt: Sequence[tuple[str, str]] = (("user", "I have a headache, what should I do?"),),
    rubrics: Sequence[tuple[int, str, Sequence[str]]] = (
        (5, "Advises rest and hydration", ("axis:completeness", "level:example")),
        (-3, "Recommends an unsafe dose", ("axis:accuracy", "level:example")),
    ),
    example_tags: Sequence[str] = ("theme:context_seeking",),
    ideal: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A row in the official HealthBench schema (made up, never real data)."""
    return {
        "prompt": [{"role": role, "content": content} for role, content in prompt],
        "prompt_id": prompt_id,
        "example_tags": list(example_tags),
        "rubrics": [{"criterion": c, "points": p, "tags": list(t)} for p, c, t in rubrics],
        "ideal_completions_data": ideal,
        "canary": "made-up test row",
    }


def numbered_rows(n: int) -> list[dict[str, Any]]:
    """`n` rows by `make_row`, t000, t001, ..., each asking a question of its own (so each gets a reply of its own)."""
    return [make_row(f"t{i:03d}", prompt=(("user", f"Question {i}: I feel dizzy."),)) for i in range(n)]


def write_jsonl(path: Path, rows: Sequence[Any]) -> Path:
    """Write one JSON value per line."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def sample_path() -> Path:
    """The 500 real sample rows, or a clean skip where the shared folder is absent."""
    if not SAMPLE.is_file():
        pytest.skip(f"sample data not found at {SAMPLE}")
    return SAMPLE


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """A fake OpenAI-compatible server on 127.0.0.1 with prompt-determined verdicts."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def module_fake() -> Iterator[FakeOpenAI]:
    """One fake grader for all of a module's tests (and its `server`): prompt-determined verdicts, and a failure for
    every grader request about a reply marked `tests.serving.UNGRADABLE`."""
    # Imported here: tests.serving imports this module's helpers.
    from tests.serving import fails_marked

    with FakeOpenAI(fail_always=fails_marked) as server:
        yield server


@pytest.fixture(scope="module")
def data(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The requesting module's `ROWS`, written once for its tests to a rows file in a folder of its own."""
    return write_jsonl(tmp_path_factory.mktemp("rows") / "rows.jsonl", request.module.ROWS)


@dataclass(frozen=True)
class Serving:
    """How the `server` fixture starts `healthbench serve` for a module: the module's `SERVING` (without one, the
    defaults: no token file, no flags, nothing added to its environment, so no token and no grader key)."""

    token_file: str | None = None
    """The text of an `--auth-token-file` to serve with, written beside the rows (None: no file)."""
    flags: tuple[str, ...] = ()
    """Flags after `--auth-token-file`."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The server's environment beyond what `tests.serving.served_with_log` sets."""
    not_in_output: tuple[str, ...] = ()
    """Strings the server's output must not hold when it stops (besides the grader key, which is never allowed)."""


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, data: Path, module_fake: FakeOpenAI) -> Iterator[tuple[str, list[str]]]:
    """`healthbench serve` on `data`, graded by `module_fake`, as the module's `SERVING` says, shared by the
    module's tests: its URL and the lines it has printed so far (the list grows as it prints)."""
    # Imported here: tests.serving imports this module's helpers.
    from tests.serving import served_with_log

    serving = getattr(request.module, "SERVING", Serving())
    assert isinstance(serving, Serving)
    flags = list(serving.flags)
    if serving.token_file is not None:
        tokens = data.parent / "tokens"
        tokens.write_text(serving.token_file, encoding="utf-8")
        flags = ["--auth-token-file", str(tokens), *flags]
    assert module_fake.base_url
    with served_with_log(data, module_fake.base_url, *flags, env=serving.env) as (url, lines):
        yield url, lines
    output = "".join(lines)
    for text in serving.not_in_output:
        assert text not in output


@pytest.fixture(scope="module")
def url(server: tuple[str, list[str]]) -> str:
    """The URL of the module's `server`."""
    return server[0]


@pytest.fixture
def grader(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """A fake grader (as `module_fake`'s, for one test) reached as a trainer's environment names it: serve's
    variables, with the grader key; `OPENAI_BASE_URL` points at nothing, as a trainer that sets it for its policy
    would; no pacing or concurrency of the environment's; no trainer library reaching the Hub."""
    # Imported here: tests.reference and tests.serving import this module's helpers.
    from tests.reference import KEY
    from tests.serving import POLICY_BASE_URL, fails_marked

    with FakeOpenAI(fail_always=fails_marked) as server:
        assert server.base_url
        monkeypatch.setenv("HEALTHBENCH_GRADER_BASE_URL", server.base_url)
        monkeypatch.setenv("HEALTHBENCH_GRADER_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", POLICY_BASE_URL)
        monkeypatch.delenv("HEALTHBENCH_GRADER_CONCURRENCY", raising=False)
        monkeypatch.delenv("HEALTHBENCH_PACE_STORE", raising=False)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        yield server


@pytest.fixture
def no_grader(monkeypatch: pytest.MonkeyPatch) -> None:
    """No grader URL, model or key in the environment (`OPENAI_BASE_URL` names a trainer's policy, where nothing
    listens), no pace store, and no judge's model known yet to the verl reward file (`integrations.verl`)."""
    # Imported here: tests.serving imports this module's helpers.
    from healthbench.integrations import verl as verl_rewards
    from tests.serving import POLICY_BASE_URL

    for name in (
        "HEALTHBENCH_GRADER_BASE_URL",
        "HEALTHBENCH_GRADER_API_KEY",
        "HEALTHBENCH_GRADER_MODEL",
        "OPENAI_API_KEY",
        "CHAT_API_KEY",
        "CHAT_BASE_URL",
        "HEALTHBENCH_GRADER_CONCURRENCY",
        "HEALTHBENCH_PACE_STORE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", POLICY_BASE_URL)
    monkeypatch.setattr(verl_rewards, "_served", {})


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server shared by a module's tests (mark them `tests.redisserver.needs_redis`)."""
    yield from redis_server(tmp_path_factory.mktemp("redis"))


@pytest.fixture
def start_fake() -> Iterator[StartFake]:
    """Start FakeOpenAI servers with the given arguments, each with a client of its files and batches routes; all
    are stopped afterwards."""
    servers: list[FakeOpenAI] = []

    def start(**kwargs: Any) -> tuple[FakeOpenAI, Client]:
        server = FakeOpenAI(**kwargs)
        servers.append(server)
        return server, Client(server.start())

    yield start
    for server in servers:
        server.stop()
