"""HealthBench Professional: its schema converted to rows, bad rows named, and the checked Hub download."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants as hf_constants

from healthbench.data import cache, professional, subsets
from healthbench.data import hub as hub_module
from healthbench.data.loading import load_professional_rows, load_rows
from healthbench.errors import DataError
from tests.conftest import make_row, write_jsonl
from tests.fakehub import FakeHub

FILENAME = professional.PROFESSIONAL_FILENAME
DATASET = professional.PROFESSIONAL_DATASET


def pro_row(task_id: str = "t1", **changes: Any) -> dict[str, Any]:
    """A row in HealthBench Professional's schema (made up, never real data)."""
    row: dict[str, Any] = {
        "id": task_id,
        "conversation": [
            {"role": "user", "content": "Draft a discharge note for a made-up patient."},
            {"role": "assistant", "content": "Which diagnosis should it cover?"},
            {"role": "user", "content": "Community-acquired pneumonia."},
        ],
        "rubric_items": [
            {"criterion_text": "States the antibiotic course", "points": 7},
            {"criterion_text": "Invents a lab value", "points": -4},
        ],
        "use_case": "writing",
        "type": "good_faith",
        "difficulty": "hard",
        "specialty": "Internal Medicine",
        "physician_response": "Discharge summary: ...",
        "canary": "made-up test row",
    }
    row.update(changes)
    return row


def test_row_is_converted_to_the_project_row(tmp_path: Path) -> None:
    (row,) = load_professional_rows(write_jsonl(tmp_path / "p.jsonl", [pro_row("t1")]))
    assert row.prompt_id == "t1"
    assert [(m.role, m.content) for m in row.prompt][-1] == ("user", "Community-acquired pneumonia.")
    assert len(row.prompt) == 3
    assert [(i.criterion, i.points, i.tags) for i in row.rubrics] == [
        ("States the antibiotic course", 7, []),
        ("Invents a lab value", -4, []),
    ]
    assert row.example_tags == ["use_case:writing", "type:good_faith", "difficulty:hard", "specialty:Internal Medicine"]
    assert row.physician_response == "Discharge summary: ..."
    assert row.ideal_completions_data is None


def test_conversation_as_an_object_and_slices_left_out(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "Summarise this made-up trial."}]
    row = pro_row("t1", conversation={"messages": messages}, specialty="", difficulty=None)
    del row["physician_response"], row["type"]
    (loaded,) = load_professional_rows(write_jsonl(tmp_path / "p.jsonl", [row]))
    assert [m.content for m in loaded.prompt] == ["Summarise this made-up trial."]
    assert loaded.example_tags == ["use_case:writing"]
    assert loaded.physician_response is None


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ({"id": "a", "prompt_id": "b", "task_id": "c"}, "a"),
        ({"prompt_id": "b", "task_id": "c"}, "b"),
        ({"id": None, "task_id": "c"}, "c"),
        ({"id": 42}, "42"),
    ],
)
def test_id_field_variants(tmp_path: Path, ids: dict[str, Any], expected: str) -> None:
    row = pro_row()
    del row["id"]
    row.update(ids)
    assert load_professional_rows(write_jsonl(tmp_path / "p.jsonl", [row]))[0].prompt_id == expected


def _set_points(value: object) -> Callable[[dict[str, Any]], None]:
    return lambda r: r["rubric_items"][1].update(points=value)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda r: r.pop("rubric_items"), "field rubric_items: Field required"),
        (lambda r: r.pop("conversation"), "field conversation: Field required"),
        (lambda r: r.pop("id"), "field id: Field required (the id is read from id, prompt_id, task_id"),
        (lambda r: r.update(id=True), "field id: Input should be a valid string"),
        (_set_points(2.0), "field rubric_items.1.points"),
        (_set_points("5"), "field rubric_items.1.points"),
        (lambda r: r["rubric_items"][0].pop("criterion_text"), "field rubric_items.0.criterion_text"),
        (lambda r: r["rubric_items"][0].update(points=-1), "field rubric_items: no item has positive points"),
        (lambda r: r.update(rubric_items=[]), "field rubric_items:"),
        (lambda r: r["conversation"].pop(), "field conversation: must end on a user turn, ends on 'assistant'"),
        (lambda r: r.update(conversation={"messages": []}), "field conversation:"),
        (lambda r: r["conversation"][0].update(role="tool"), "field conversation.0.role"),
        (lambda r: r.update(use_case=3), "field use_case"),
    ],
)
def test_bad_row_names_file_line_and_field(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], Any], expected: str
) -> None:
    bad = pro_row("t2")
    mutate(bad)
    path = write_jsonl(tmp_path / "p.jsonl", [pro_row("t1"), bad])
    with pytest.raises(DataError) as caught:
        load_rows(path)
    assert str(caught.value).startswith(f"{path}:2: ")
    assert expected in str(caught.value)


def test_bad_json_and_duplicate_ids(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(pro_row("t1")) + "\n\n{not json\n")
    with pytest.raises(DataError, match=r"p\.jsonl:3: invalid JSON"):
        load_rows(path)
    second = pro_row("x")
    del second["id"]
    second["task_id"] = "t1"
    write_jsonl(path, [pro_row("t1"), pro_row("t2"), second])
    with pytest.raises(DataError, match=r"p\.jsonl:3: field task_id: duplicate 't1', first on line 1"):
        load_rows(path)


def test_load_rows_tells_the_schemas_apart(tmp_path: Path) -> None:
    pro = write_jsonl(tmp_path / "p.jsonl", [pro_row("t1"), pro_row("t2")])
    assert load_rows(pro) == load_professional_rows(pro)
    assert [r.prompt_id for r in load_rows(pro)] == ["t1", "t2"]
    plain = tmp_path / "h.jsonl"
    plain.write_text("\n" + json.dumps(make_row("a")) + "\n")
    assert load_rows(plain)[0].rubrics[0].tags == ["axis:completeness", "level:example"]
    mixed = write_jsonl(tmp_path / "m.jsonl", [pro_row("t1"), make_row("a")])
    with pytest.raises(DataError, match=r"m\.jsonl:2: a HealthBench row in a HealthBench Professional file"):
        load_rows(mixed)
    mixed = write_jsonl(tmp_path / "m.jsonl", [make_row("a"), make_row("b"), pro_row("t1")])
    with pytest.raises(DataError, match=r"m\.jsonl:3: a HealthBench Professional row in a HealthBench file"):
        load_rows(mixed)
    with pytest.raises(DataError, match=r"h\.jsonl:2: a HealthBench row in a HealthBench Professional file"):
        load_professional_rows(plain)


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No data folder, override, token or pinned revision from the machine; the cache in tmp_path."""
    names = ("HEALTHBENCH_DATA_DIR", cache.OVERRIDE_ENV, cache.ROW_COUNT_ENV, professional.REVISION_ENV, "HF_TOKEN")
    for name in (*names, "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HEALTHBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    # huggingface_hub's user agent would fetch an agent registry from its import-time endpoint, huggingface.co.
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(subsets, "PROFESSIONAL_ROWS", 2)
    return tmp_path / "cache"


def test_data_dir_serves_it_offline(tmp_path: Path, clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offline = tmp_path / "offline"
    offline.mkdir()
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(offline))
    with pytest.raises(DataError, match=f"{FILENAME}: not found"):
        subsets.subset_path("professional")
    write_jsonl(offline / FILENAME, [pro_row("t1"), pro_row("t2")])
    assert subsets.subset_path("professional") == offline / FILENAME
    assert [r.prompt_id for r in subsets.load_subset("professional")] == ["t1", "t2"]
    write_jsonl(offline / FILENAME, [pro_row("t1")])
    # The row count has an override of its own: the sha256 one does not let a short file through.
    monkeypatch.setenv(cache.OVERRIDE_ENV, "1")
    with pytest.raises(DataError, match=f"1 rows, the official professional file has 2; set {cache.ROW_COUNT_ENV}"):
        subsets.load_subset("professional")
    monkeypatch.setenv(cache.ROW_COUNT_ENV, "1")
    assert len(subsets.load_subset("professional")) == 1
    assert not clean_env.exists()


def _body(*ids: str) -> bytes:
    return "".join(json.dumps(pro_row(i)) + "\n" for i in ids).encode()


@pytest.fixture
def hub(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A fake Hub on 127.0.0.1 that HF_ENDPOINT points at, holding one commit of the file on main."""
    with FakeHub(DATASET) as server:
        server.commit({FILENAME: _body("t1", "t2")})
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def _record(cache: Path) -> dict[str, Any]:
    return dict(json.loads((cache / f"{FILENAME}.json").read_text()))


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name not in (FILENAME, f"{FILENAME}.json"))


def test_first_download_records_revision_and_sha256(hub: FakeHub, clean_env: Path) -> None:
    commit = hub.commit({FILENAME: _body("t1", "t2")})  # main's newest commit is the one pinned
    rows = subsets.load_subset("professional")
    assert [r.prompt_id for r in rows] == ["t1", "t2"]
    cached = clean_env / FILENAME
    assert cached.read_bytes() == _body("t1", "t2")
    record = _record(clean_env)
    assert record["revision"] == commit and record["requested"] == "main"
    assert record["sha256"] == hashlib.sha256(_body("t1", "t2")).hexdigest()
    assert record["downloaded_at"]
    assert ("GET", f"/datasets/{DATASET}/resolve/{commit}/{FILENAME}") in hub.requests
    assert _leftovers(clean_env) == []

    seen = len(hub.requests)
    assert subsets.subset_path("professional") == cached
    assert len(subsets.load_subset("professional")) == 2
    assert len(hub.requests) == seen  # the second load asks nothing


def test_deleted_file_is_fetched_again_at_the_recorded_revision(hub: FakeHub, clean_env: Path) -> None:
    subsets.load_subset("professional")
    pinned = _record(clean_env)["revision"]
    hub.commit({FILENAME: _body("t1", "t3")})  # a newer main must not be picked up
    (clean_env / FILENAME).unlink()
    seen = len(hub.requests)
    assert [r.prompt_id for r in subsets.load_subset("professional")] == ["t1", "t2"]
    assert {path.split("/")[-2] for _, path in hub.requests[seen:]} == {pinned}
    assert _record(clean_env)["revision"] == pinned


def test_pinned_revision_from_the_environment(hub: FakeHub, clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = hub.commit({FILENAME: _body("t8", "t9")}, ref="v1")
    hub.commit({FILENAME: _body("t1", "t3")})
    monkeypatch.setenv(professional.REVISION_ENV, "v1")
    assert [r.prompt_id for r in subsets.load_subset("professional")] == ["t8", "t9"]
    assert _record(clean_env)["revision"] == first and _record(clean_env)["requested"] == "v1"
    seen = len(hub.requests)
    monkeypatch.setenv(professional.REVISION_ENV, first)  # the same commit by its sha: still the cached file
    subsets.load_subset("professional")
    assert len(hub.requests) == seen


def test_a_changed_file_is_refused(hub: FakeHub, clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subsets.load_subset("professional")
    record = _record(clean_env)
    hub.rewrite(record["revision"], FILENAME, _body("t1", "t2", "t3"))
    (clean_env / FILENAME).unlink()
    with pytest.raises(DataError) as caught:
        subsets.load_subset("professional")
    message = str(caught.value)
    assert "the file changed" in message and record["sha256"] in message
    assert hashlib.sha256(_body("t1", "t2", "t3")).hexdigest() in message
    assert f"delete {clean_env / FILENAME}.json" in message and cache.OVERRIDE_ENV in message
    assert not (clean_env / FILENAME).exists() and _leftovers(clean_env) == []
    monkeypatch.setattr(subsets, "PROFESSIONAL_ROWS", 3)
    monkeypatch.setenv(cache.OVERRIDE_ENV, "1")  # used this once, not recorded
    assert len(subsets.load_subset("professional")) == 3
    assert _record(clean_env) == record
    monkeypatch.delenv(cache.OVERRIDE_ENV)
    with pytest.raises(DataError, match="changed since it was downloaded"):
        subsets.load_subset("professional")
    (clean_env / f"{FILENAME}.json").unlink()  # accepting the new file, as the message says
    assert len(subsets.load_subset("professional")) == 3
    assert _record(clean_env)["sha256"] == hashlib.sha256(_body("t1", "t2", "t3")).hexdigest()


def test_a_cached_file_changed_on_disk_is_refused(hub: FakeHub, clean_env: Path) -> None:
    subsets.load_subset("professional")
    cached = clean_env / FILENAME
    cached.write_bytes(cached.read_bytes() + b"\n")
    with pytest.raises(DataError, match="changed since it was downloaded"):
        subsets.load_subset("professional")


@pytest.mark.parametrize("status", [401, 403])
def test_refused_access_says_how_to_get_it(hub: FakeHub, clean_env: Path, status: int) -> None:
    hub.fail_with(status)
    with pytest.raises(DataError) as caught:
        subsets.load_subset("professional")
    message = str(caught.value)
    assert f"dataset {DATASET} was refused (HTTP {status})" in message
    assert f"https://huggingface.co/datasets/{DATASET}" in message and "HF_TOKEN" in message
    assert not (clean_env / FILENAME).exists()


def test_hf_token_opens_a_gated_dataset(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHub(DATASET, token="hf_made_up_token") as gated:
        gated.commit({FILENAME: _body("t1", "t2")})
        monkeypatch.setenv("HF_ENDPOINT", gated.url)
        monkeypatch.setenv("HF_TOKEN", "hf_wrong_made_up_token")
        with pytest.raises(DataError, match=r"was refused \(HTTP 403\)") as caught:
            subsets.subset_path("professional")
        assert "hf_wrong_made_up_token" not in str(caught.value)  # never a token in a message
        monkeypatch.setenv("HF_TOKEN", "hf_made_up_token")
        assert len(subsets.load_subset("professional")) == 2
        assert gated.authorized[-1]


def test_missing_file_names_the_url(hub: FakeHub, clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(professional.REVISION_ENV, "no-such-tag")
    with pytest.raises(DataError) as caught:
        subsets.subset_path("professional")
    assert f"{hub.url}/datasets/{DATASET}/resolve/no-such-tag/{FILENAME}: HTTP 404 (RevisionNotFound)" in str(
        caught.value
    )


def test_a_failed_download_leaves_nothing(hub: FakeHub, clean_env: Path) -> None:
    hub.fail_with(500, method="GET")  # the metadata is there, the body is not
    with pytest.raises(DataError, match=r"HTTP 500\. To work offline, set HEALTHBENCH_DATA_DIR"):
        subsets.load_subset("professional")
    assert ("GET", f"/datasets/{DATASET}/resolve/{hub.requests[-1][1].split('/')[-2]}/{FILENAME}") in hub.requests
    assert list(clean_env.iterdir()) == []
    hub.fail_with(None)
    assert len(subsets.load_subset("professional")) == 2


def test_no_network_names_the_offline_ways(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(DataError) as caught:
        subsets.load_subset("professional")
    message = str(caught.value)
    assert f"Hugging Face dataset {DATASET} from http://127.0.0.1:{port}/datasets/{DATASET}/resolve/main/" in message
    assert "Connection refused" in message  # the cause, whichever HTTP library huggingface_hub uses
    # The way every command has; a command that takes --data adds its own (test_downloads.py).
    assert message.endswith(f"To work offline, set HEALTHBENCH_DATA_DIR to a folder holding {FILENAME}.")
    assert not clean_env.exists() or list(clean_env.iterdir()) == []


def test_a_timeout_names_the_offline_ways(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as silent:  # accepts connections (in its backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(hub_module, "TIMEOUT", 0.2)
        with pytest.raises(DataError, match=r"ReadTimeout: .* To work offline, set HEALTHBENCH_DATA_DIR"):
            subsets.subset_path("professional")
    assert not clean_env.exists() or list(clean_env.iterdir()) == []
