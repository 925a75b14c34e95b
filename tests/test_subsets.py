"""Named subsets: download from a loopback server, hash and row-count checks, the cache, offline folders."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from healthbench.data import cache, subsets
from healthbench.data.subsets import Subset
from healthbench.errors import DataError
from tests.conftest import make_row, write_jsonl


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Subset]]:
    """A loopback HTTP server holding a made-up 'full' file, registered under the official name."""
    served = tmp_path / "served"
    served.mkdir()
    body = write_jsonl(served / "file.jsonl", [make_row("a"), make_row("b")]).read_bytes()
    subset = Subset("full", "file.jsonl", hashlib.sha256(body).hexdigest(), 2)
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(served))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setitem(subsets.SUBSETS, "full", subset)
    monkeypatch.setenv("HEALTHBENCH_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}/")
    monkeypatch.setenv("HEALTHBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HEALTHBENCH_DATA_DIR", raising=False)
    monkeypatch.delenv(cache.OVERRIDE_ENV, raising=False)
    monkeypatch.delenv(cache.ROW_COUNT_ENV, raising=False)
    yield served, subset
    server.shutdown()


def test_download_checks_and_caches(mirror: tuple[Path, Subset], tmp_path: Path) -> None:
    served, subset = mirror
    rows = subsets.load_subset("full")
    assert [r.prompt_id for r in rows] == ["a", "b"]
    cached = tmp_path / "cache" / "file.jsonl"
    assert cached.read_bytes() == (served / "file.jsonl").read_bytes()
    assert (tmp_path / "cache" / "file.jsonl.sha256").read_text().strip() == subset.sha256
    assert not list((tmp_path / "cache").glob("*.part"))
    (served / "file.jsonl").unlink()  # the second load must come from the cache
    assert len(subsets.load_subset("full")) == 2


def test_hash_mismatch_stops_the_load(
    mirror: tuple[Path, Subset], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served, subset = mirror
    write_jsonl(served / "file.jsonl", [make_row("a"), make_row("c")])
    with pytest.raises(DataError) as caught:
        subsets.load_subset("full")
    message = str(caught.value)
    actual = hashlib.sha256((served / "file.jsonl").read_bytes()).hexdigest()
    assert "file.jsonl" in message and subset.sha256 in message and actual in message
    assert cache.OVERRIDE_ENV in message
    assert not (tmp_path / "cache" / "file.jsonl").exists()
    monkeypatch.setenv(cache.OVERRIDE_ENV, "1")
    assert [r.prompt_id for r in subsets.load_subset("full")] == ["a", "c"]


def test_changed_cache_file_is_noticed(mirror: tuple[Path, Subset], tmp_path: Path) -> None:
    subsets.load_subset("full")
    cached = tmp_path / "cache" / "file.jsonl"
    cached.write_bytes(cached.read_bytes() + b"\n")
    with pytest.raises(DataError, match="changed since it was downloaded"):
        subsets.load_subset("full")


def test_row_count_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_jsonl(tmp_path / "file.jsonl", [make_row("a")])
    subset = Subset("full", "file.jsonl", hashlib.sha256(path.read_bytes()).hexdigest(), 2)
    monkeypatch.setitem(subsets.SUBSETS, "full", subset)
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(tmp_path))
    monkeypatch.delenv(cache.ROW_COUNT_ENV, raising=False)
    monkeypatch.setenv(cache.OVERRIDE_ENV, "1")  # not the row count's override: the hash matches anyway
    with pytest.raises(DataError, match=f"1 rows, the official full file has 2; set {cache.ROW_COUNT_ENV}=1"):
        subsets.load_subset("full")
    monkeypatch.setenv(cache.ROW_COUNT_ENV, "1")
    assert [r.prompt_id for r in subsets.load_subset("full")] == ["a"]


def test_own_file_in_the_data_dir_is_not_the_official_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The user's own copy: never "delete it" (nothing would download over it), but what it is and how to use it.
    path = write_jsonl(tmp_path / "file.jsonl", [make_row("a")])
    monkeypatch.setitem(subsets.SUBSETS, "full", Subset("full", "file.jsonl", "0" * 64, 5000))
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(tmp_path))
    for name in (cache.OVERRIDE_ENV, cache.ROW_COUNT_ENV):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(DataError) as caught:
        subsets.load_subset("full")
    message = str(caught.value)
    assert message.startswith(f"{path}: sha256 {hashlib.sha256(path.read_bytes()).hexdigest()} does not match")
    assert "it is not the official file" in message and f"set {cache.OVERRIDE_ENV}=1" in message
    assert "delete" not in message
    # Accepted as another file, it is not held to the official row count either.
    monkeypatch.setenv(cache.OVERRIDE_ENV, "1")
    assert [r.prompt_id for r in subsets.load_subset("full")] == ["a"]


def test_data_dir_is_used_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEALTHBENCH_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match="not found"):
        subsets.subset_path("hard")
    with pytest.raises(DataError, match="unknown subset"):
        subsets.subset_path("nope")


def test_names_the_cli_offers() -> None:
    assert subsets.TASK_SUBSETS == ("full", "hard", "consensus", "professional")
    assert subsets.DOWNLOADABLE == ("full", "hard", "consensus", "professional", "meta")
    assert set(subsets.SUBSETS) == set(subsets.DOWNLOADABLE) - {"professional"}  # the blob-store files
    with pytest.raises(DataError, match="choose one of full, hard, consensus, professional, meta"):
        subsets.subset_path("nope")
    with pytest.raises(DataError, match="load it with load_meta_subset"):
        subsets.load_subset("meta")
