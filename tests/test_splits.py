"""Splits for training: hand-checkable sizes, the properties every split has (disjoint, covering, stratified,
the same in any process), and the 500 sample rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from healthbench.data.loading import load_rows
from healthbench.data.schema import Row
from healthbench.data.splits import SPLITS, assign_splits, split_rows, theme_of
from healthbench.errors import DataError, SettingsError, UnknownPromptId

from .conftest import make_row


def rows_of(themes: dict[str, int], prefix: str = "t") -> list[Row]:
    """Made-up rows: `count` rows of each theme, ids `<prefix><theme>-<n>`."""
    return [
        Row.model_validate(make_row(f"{prefix}{theme}-{n}", example_tags=(f"theme:{theme}",)))
        for theme, count in themes.items()
        for n in range(count)
    ]


def counts(rows: Sequence[Row], assigned: Mapping[str, str], split: str) -> dict[str, int]:
    """How many rows of each theme a split holds."""
    return dict(Counter(theme_of(row) for row in rows if assigned[row.prompt_id] == split))


def test_sizes_by_hand_with_largest_remainder() -> None:
    # 100 rows: heldout 20% of 50/30/20 is exactly 10/6/4. Validation is 5% of the 40/24/16 left, 4 in all: 2, 1.2
    # and 0.8 floor to 2, 1, 0, and the one left goes to the largest remainder (c's 0.8).
    rows = rows_of({"a": 50, "b": 30, "c": 20})
    assigned = assign_splits(rows)
    assert counts(rows, assigned, "heldout") == {"a": 10, "b": 6, "c": 4}
    assert counts(rows, assigned, "validation") == {"a": 2, "b": 1, "c": 1}
    assert counts(rows, assigned, "train") == {"a": 38, "b": 23, "c": 15}


def test_small_data_rounds_half_up() -> None:
    # 10 rows of one theme: heldout 2; validation 5% of 8 = 0.4 rounds to none.
    rows = rows_of({"a": 10})
    assigned = assign_splits(rows)
    assert Counter(assigned.values()) == {"train": 8, "heldout": 2}
    # 30 rows: heldout 6, validation 5% of 24 = 1.2, so one.
    assert Counter(assign_splits(rows_of({"a": 30})).values()) == {"train": 23, "heldout": 6, "validation": 1}


def test_the_choice_is_pinned() -> None:
    # The seeded order is sha256 of the seed and the prompt_id: a change of it would move tasks between splits
    # of runs already made, so the choice on these rows is written down. Each theme's heldout row is the one whose
    # sha256 is least, checked by hand with `printf '0\nta-1' | sha256sum` (0101cd87...) for ta-0 to ta-4.
    rows = rows_of({"a": 5, "b": 5})
    assigned = assign_splits(rows, seed=0)
    assert sorted(pid for pid, split in assigned.items() if split == "heldout") == ["ta-1", "tb-4"]
    assert sorted(pid for pid, split in assign_splits(rows, seed=1).items() if split == "heldout") == ["ta-4", "tb-4"]


def test_official_shape_heldout_given() -> None:
    # The official data's shape: 5,000 rows in seven themes, 1,000 of them the heldout file's.
    themes = {"emergency_referrals": 482, "communication": 919, "hedging": 1071, "complex_responses": 444}
    themes |= {"health_data_tasks": 477, "global_health": 1097, "context_seeking": 510}
    rows = rows_of(themes)
    heldout = rows[::5]
    assigned = assign_splits(rows, heldout=heldout)
    assert Counter(assigned.values()) == {"train": 3800, "validation": 200, "heldout": 1000}
    assert {pid for pid, split in assigned.items() if split == "heldout"} == {row.prompt_id for row in heldout}
    rest = [row for row in rows if assigned[row.prompt_id] != "heldout"]
    by_theme = Counter(theme_of(row) for row in rest)
    for theme, size in counts(rows, assigned, "validation").items():
        # Each theme's share of validation is its share of the rest, within one row.
        assert abs(size - by_theme[theme] * 200 / 4000) < 1


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("given", [False, True])
def test_disjoint_covering_and_in_order(seed: int, given: bool) -> None:
    rows = [*rows_of({"a": 37, "b": 11, "c": 3}), Row.model_validate(make_row("untagged", example_tags=()))]
    heldout = rows[3:9] if given else None
    assigned = assign_splits(rows, heldout=heldout, seed=seed)
    parts = {split: split_rows(rows, split, heldout=heldout, seed=seed) for split in SPLITS}
    ids = [[row.prompt_id for row in part] for part in parts.values()]
    assert sorted(pid for part in ids for pid in part) == sorted(row.prompt_id for row in rows)
    assert sum(len(part) for part in ids) == len(rows)
    for split, part in parts.items():
        assert all(assigned[row.prompt_id] == split for row in part)
        # Each split keeps the data's order.
        positions = [rows.index(row) for row in part]
        assert positions == sorted(positions)


def test_stable_across_calls_and_input_order() -> None:
    rows = rows_of({"a": 40, "b": 25})
    first = assign_splits(rows, seed=3)
    assert assign_splits(rows, seed=3) == first
    assert assign_splits(list(reversed(rows)), seed=3) == first
    assert assign_splits(rows, seed=4) != first


def test_stable_across_processes() -> None:
    # Python's string hash is salted per process; the split must not depend on it.
    code = (
        "import json, sys; from healthbench.data.schema import Row; from healthbench.data.splits import assign_splits;"
        "rows = [Row.model_validate(r) for r in json.load(sys.stdin)];"
        "print(json.dumps(assign_splits(rows, seed=5), sort_keys=True))"
    )
    raw = [make_row(f"id-{n}", example_tags=(f"theme:{'xyz'[n % 3]}",)) for n in range(60)]
    results = set()
    for salt in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": salt}
        done = subprocess.run(
            [sys.executable, "-c", code], input=json.dumps(raw), capture_output=True, text=True, env=env, check=True
        )
        results.add(done.stdout)
    assert len(results) == 1
    rows = [Row.model_validate(r) for r in raw]
    assert json.loads(results.pop()) == assign_splits(rows, seed=5)


def test_heldout_not_in_the_data_is_named() -> None:
    rows = rows_of({"a": 5})
    stranger = Row.model_validate(make_row("elsewhere"))
    with pytest.raises(DataError, match="'elsewhere'"):
        assign_splits(rows, heldout=[rows[0], stranger])


def test_duplicate_ids_and_unknown_split_refused() -> None:
    rows = rows_of({"a": 3})
    with pytest.raises(DataError, match="'ta-1' appears twice"):
        assign_splits([*rows, rows[1]])
    with pytest.raises(SettingsError, match="unknown split 'test'; choose one of train, validation, heldout"):
        split_rows(rows, "test")  # type: ignore[arg-type]


def test_unknown_prompt_id_names_both() -> None:
    error = UnknownPromptId("p9", "train")
    assert isinstance(error, DataError)
    assert str(error) == "prompt_id 'p9' is not in split 'train'"
    assert (error.prompt_id, error.split) == ("p9", "train")


def test_one_reading_of_data_subset_split_heldout_and_seed(tmp_path: Path) -> None:
    from healthbench.data.source import TaskSource

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(make_row("a")) + "\n", encoding="utf-8")
    chosen = TaskSource.chosen(str(data), split="train", heldout=data, seed=3)
    assert (chosen.path, chosen.split, chosen.heldout, chosen.split_seed) == (data, "train", data, 3)
    assert TaskSource.chosen() == TaskSource.named("full") == TaskSource.chosen("subset:full")
    assert TaskSource.chosen(subset="hard").subset == "hard"
    with pytest.raises(SettingsError, match="give `data` or `subset`, not both"):
        TaskSource.chosen(data, "full")
    with pytest.raises(SettingsError, match="`heldout` goes with `split`"):
        TaskSource.chosen(data, heldout=data)
    with pytest.raises(SettingsError, match="`heldout` goes with `data`"):
        TaskSource.chosen(split="train", heldout=data)
    with pytest.raises(SettingsError, match="`split` splits the full set or a `data` file, not the hard subset"):
        TaskSource.chosen("hard", split="train")


def test_the_sample_rows(sample_path: Path) -> None:
    rows = load_rows(sample_path)
    assigned = assign_splits(rows)
    assert Counter(assigned.values()) == {"train": 380, "validation": 20, "heldout": 100}
    by_theme = Counter(theme_of(row) for row in rows)
    assert "" not in by_theme  # every sample row has its theme
    for theme, size in counts(rows, assigned, "heldout").items():
        assert abs(size - by_theme[theme] / 5) < 1


def test_rows_read_from_json_split_as_their_rows_do(tmp_path: Path) -> None:
    # As a new user reads a file: json.loads of each line. Before, split_rows raised AttributeError on a dict.
    raw = [make_row(f"j{n}", example_tags=(f"theme:{'abc'[n % 3]}",)) for n in range(40)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in raw), "utf-8")
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    hard_rows = rows[::5]
    loaded = load_rows(path)
    for split in SPLITS:
        chosen = split_rows(rows, split, heldout=hard_rows, seed=0)
        # The caller's own objects come back, the same rows the loaded file's split holds.
        assert all(any(row is given for given in rows) for row in chosen)
        expected = split_rows(loaded, split, heldout=load_rows(path)[::5], seed=0)
        assert [row["prompt_id"] for row in chosen] == [row.prompt_id for row in expected]
    assert assign_splits(rows, seed=2) == assign_splits(loaded, seed=2)


def test_professional_rows_read_from_json_split_by_their_id() -> None:
    raw = [
        {
            "id": n,
            "conversation": [{"role": "user", "content": f"Q{n}?"}],
            "rubric_items": [{"criterion_text": "Rests.", "points": 3}],
        }
        for n in range(12)
    ]
    assigned = assign_splits(raw)
    assert sorted(assigned) == sorted(str(n) for n in range(12))
    assert [row["id"] for row in split_rows(raw, "heldout")] == [
        int(prompt_id) for prompt_id, split in assigned.items() if split == "heldout"
    ]


def test_what_is_not_a_row_is_named_by_its_place_and_field() -> None:
    good = [make_row(f"g{n}") for n in range(5)]
    with pytest.raises(DataError, match=r"^rows\[5\]: field prompt: Field required$"):
        split_rows([*good, {"prompt_id": "bare"}], "train")
    with pytest.raises(DataError, match=r"^rows\[1\]: field prompt: must end on a user turn, ends on 'assistant'$"):
        assign_splits([good[0], make_row("x", prompt=(("user", "Hi"), ("assistant", "Hello")))])
    with pytest.raises(DataError, match=r"^rows\[0\]: a value of type str, not a row \(give `Row`s"):
        split_rows(["p1"], "train")  # type: ignore[type-var]
    with pytest.raises(DataError, match=r"^heldout\[0\]: field rubrics: Field required$"):
        assign_splits(
            good, heldout=[{"prompt": [{"role": "user", "content": "?"}], "prompt_id": "g1", "example_tags": []}]
        )
    meta = {"prompt": [], "completion": "c", "rubric": "r", "binary_labels": [True], "prompt_id": "m"}
    with pytest.raises(DataError, match=r"^rows\[0\]: a HealthBench meta-evaluation row, not a task row$"):
        assign_splits([meta])
