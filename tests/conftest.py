"""Shared test helpers: rows in the official schema, the sample file when present, a fake endpoint."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from healthbench.testing import FakeOpenAI

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
