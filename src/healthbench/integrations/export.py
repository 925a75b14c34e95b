"""A split's tasks in a trainer's own dataset format, for training where RL is done: TRL's JSONL, verl's parquet and
OpenRLHF's JSONL.

Every row carries its task's `prompt_id` (what the reward side grades it by) and the conversation as chat
messages, the row's messages verbatim as `healthbench eval` sends them to the model; no row carries its rubric, so
nothing a policy is trained on holds what it is graded against. verl's `extra_info` says where the rows came from
(the split, the data, the heldout file and the seed), so its reward function finds them again.

The same rows, split and format give the same bytes: each file is written whole, then renamed into place.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from healthbench.data.schema import Row
from healthbench.data.source import TaskSource
from healthbench.data.splits import SplitName
from healthbench.errors import MissingExtra, SettingsError
from healthbench.files import write_atomic

Format = Literal["trl", "verl", "openrlhf"]
FORMATS: tuple[Format, ...] = get_args(Format)
# verl's dataset fields: the reward function is told the data source, and `ability` is free text verl logs.
DATA_SOURCE = "healthbench"
ABILITY = "medical"
# OpenRLHF's columns, as its --input_key and --label_key flags take them.
OPENRLHF_INPUT_KEY = "prompt"
OPENRLHF_LABEL_KEY = "label"
_SUFFIXES: dict[Format, str] = {"trl": ".jsonl", "verl": ".parquet", "openrlhf": ".jsonl"}


def _messages(row: Row) -> list[dict[str, str]]:
    return [{"role": message.role, "content": message.content} for message in row.prompt]


def trl_rows(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """TRL's conversational prompts: `prompt` (chat messages) and `prompt_id`, which TRL hands the reward function
    as a keyword list."""
    return [{"prompt": _messages(row), "prompt_id": row.prompt_id} for row in rows]


def openrlhf_rows(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """OpenRLHF's prompts: the chat messages under `prompt` (for `--apply_chat_template`), the prompt_id under
    `label` (sent to the reward server as the sample's label), and `prompt_id` as in every format."""
    return [
        {OPENRLHF_INPUT_KEY: _messages(row), OPENRLHF_LABEL_KEY: row.prompt_id, "prompt_id": row.prompt_id}
        for row in rows
    ]


def verl_rows(rows: Sequence[Row], split: SplitName, source: TaskSource) -> list[dict[str, Any]]:
    """verl's RL dataset rows: `data_source`, `prompt` (chat messages), `ability`, `reward_model` (rule-based, its
    ground truth the prompt_id) and `extra_info`: the split, the row's index in it, the prompt_id, and where the
    rows came from, `source`, as its reward function reads it back (`TaskSource.given`): the data (a subset's name
    or a file's absolute path), the heldout file's absolute path (or None) and the split's seed."""
    data = (source.subset or "full") if source.path is None else str(source.path.resolve())
    heldout = None if source.heldout is None else str(source.heldout.resolve())
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": _messages(row),
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": row.prompt_id},
            "extra_info": {
                "split": split,
                "index": index,
                "prompt_id": row.prompt_id,
                "data": data,
                "heldout": heldout,
                "seed": source.split_seed,
            },
        }
        for index, row in enumerate(rows)
    ]


def _jsonl(records: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def _parquet(records: Sequence[dict[str, Any]]) -> bytes:
    try:
        import pyarrow as pa  # type: ignore[import-untyped, import-not-found, unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ModuleNotFoundError:
        raise MissingExtra("verl's parquet", "pyarrow", "train") from None
    text = pa.string()
    schema = pa.schema(
        [
            ("data_source", text),
            ("prompt", pa.list_(pa.struct([("role", text), ("content", text)]))),
            ("ability", text),
            ("reward_model", pa.struct([("style", text), ("ground_truth", text)])),
            (
                "extra_info",
                pa.struct(
                    [
                        ("split", text),
                        ("index", pa.int64()),
                        ("prompt_id", text),
                        ("data", text),
                        ("heldout", text),
                        ("seed", pa.int64()),
                    ]
                ),
            ),
        ]
    )
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(list(records), schema=schema), out)
    return out.getvalue()


def export_split(rows: Sequence[Row], split: SplitName, form: str, out: Path, source: TaskSource) -> Path:
    """Write `rows` (the tasks of `split`) in the trainer's format `form` to `out/<split>.jsonl` (TRL, OpenRLHF) or
    `out/<split>.parquet` (verl), making `out` if needed; returns the file. `source` is the data the rows were split
    from (verl's `extra_info` names it). `SettingsError` for an unknown format, `MissingExtra` for parquet without
    pyarrow."""
    if form not in FORMATS:
        raise SettingsError(f"unknown export format {form!r}; choose one of {', '.join(FORMATS)}")
    body: str | bytes
    if form == "trl":
        body = _jsonl(trl_rows(rows))
    elif form == "openrlhf":
        body = _jsonl(openrlhf_rows(rows))
    else:
        body = _parquet(verl_rows(rows, split, source))
    out.mkdir(parents=True, exist_ok=True)
    return write_atomic(out / f"{split}{_SUFFIXES[form]}", body)
