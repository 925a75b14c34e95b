"""A split's tasks in a trainer's own dataset format, for training where RL is done: TRL's JSONL, verl's parquet and
OpenRLHF's JSONL.

Every row carries its task's `prompt_id` (what the reward side grades it by) and the conversation as chat
messages, the row's messages verbatim as `healthbench eval` sends them to the model; no row carries its rubric, so
nothing a policy is trained on holds what it is graded against. verl's `extra_info` says where the rows came from
(the split, the data, the heldout file and the seed), so its reward function finds them again.

The same rows, split and format give the same bytes: each file is written whole, then renamed into place.

A folder is one split of one data: `export_splits` writes a manifest beside the files (`runs.exports`: the data's
sha256, the heldout rows', the seed, each split's size and each file), and refuses to add to a folder of other
splits, naming the difference, so a task never sits in one file's train and another's heldout. A folder exported
before manifests existed is taken when every file of it holds the tasks these splits put under its name (checked
task by task: what the folder's files are is known from them, and an export of the same settings is accepted
with nothing to redo), else refused naming the file and where its tasks go now.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictStr

from healthbench.data.cache import Transfer, file_sha256, unseen
from healthbench.data.loading import read_jsonl
from healthbench.data.schema import Row
from healthbench.data.source import TaskSource
from healthbench.data.splits import SPLITS, SplitName, nonempty_split
from healthbench.errors import DataError, ExportMismatch, MissingExtra, SettingsError
from healthbench.files import write_atomic
from healthbench.runs.exports import FORMATS as FORMATS  # the formats' names, where they have always been
from healthbench.runs.exports import ExportedFile, ExportManifest, ExportOrigin, read_manifest, write_manifest
from healthbench.runs.exports import Format as Format

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


def _data_name(source: TaskSource) -> str:
    """The data as a reward function finds it again (`TaskSource.given`): a subset's name or a file's absolute
    path."""
    return (source.subset or "full") if source.path is None else str(source.path.resolve())


def _heldout_path(source: TaskSource) -> str | None:
    return None if source.heldout is None else str(source.heldout.resolve())


def verl_rows(rows: Sequence[Row], split: SplitName, source: TaskSource) -> list[dict[str, Any]]:
    """verl's RL dataset rows: `data_source`, `prompt` (chat messages), `ability`, `reward_model` (rule-based, its
    ground truth the prompt_id) and `extra_info`: the split, the row's index in it, the prompt_id, and where the
    rows came from, `source`, as its reward function reads it back (`TaskSource.given`): the data (a subset's name
    or a file's absolute path), the heldout file's absolute path (or None) and the split's seed."""
    data = _data_name(source)
    heldout = _heldout_path(source)
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


def _format(form: str) -> Format:
    for known in FORMATS:
        if form == known:
            return known
    raise SettingsError(f"unknown export format {form!r}; choose one of {', '.join(FORMATS)}")


def _body(rows: Sequence[Row], split: SplitName, form: Format, source: TaskSource) -> str | bytes:
    if form == "trl":
        return _jsonl(trl_rows(rows))
    if form == "openrlhf":
        return _jsonl(openrlhf_rows(rows))
    return _parquet(verl_rows(rows, split, source))


def _file_name(split: SplitName, form: Format) -> str:
    return f"{split}{_SUFFIXES[form]}"


def export_split(rows: Sequence[Row], split: SplitName, form: str, out: Path, source: TaskSource) -> Path:
    """Write `rows` (the tasks of `split`) in the trainer's format `form` to `out/<split>.jsonl` (TRL, OpenRLHF) or
    `out/<split>.parquet` (verl), making `out` if needed; returns the file. `source` is the data the rows were split
    from (verl's `extra_info` names it). One file, no manifest and no check of the folder: `export_splits` writes a
    folder. `SettingsError` for an unknown format, `MissingExtra` for parquet without pyarrow."""
    known = _format(form)
    body = _body(rows, split, known, source)
    out.mkdir(parents=True, exist_ok=True)
    return write_atomic(out / _file_name(split, known), body)


def export_origin(source: TaskSource, transfer: Transfer = unseen) -> ExportOrigin:
    """Where the splits of `source` come from, as a folder's manifest names them: the data, the heldout rows and
    their files' sha256, and the seed."""
    return ExportOrigin(
        data=_data_name(source),
        data_sha256=source.sha256(transfer),
        heldout=_heldout_path(source) or source.heldout_name,
        heldout_sha256=source.heldout_sha256(transfer),
        seed=source.split_seed,
    )


def export_splits(
    parts: Mapping[SplitName, Sequence[Row]],
    splits: Sequence[SplitName],
    form: str,
    out: Path,
    source: TaskSource,
    transfer: Transfer = unseen,
) -> dict[SplitName, Path]:
    """Write each of `splits` in the trainer's format `form` into the folder `out` (as `export_split` writes one),
    and the folder's manifest beside them; returns each split's file. `parts` are the rows of `source` by split
    (`TaskSource.splits`).

    Before anything is written: an empty split is a `DataError` saying why, and a folder of other splits is
    refused with `ExportMismatch` naming the difference: its manifest names other data, heldout rows or seed, or a
    file in it that the manifest does not vouch for (a folder exported before manifests, a file changed since)
    holds tasks these splits put elsewhere. A folder of the same splits takes the new files beside its own."""
    known = _format(form)
    chosen = {split: nonempty_split(parts, split, source.name) for split in dict.fromkeys(splits)}
    origin = export_origin(source, transfer)
    manifest = read_manifest(out)
    if manifest is not None and (differences := manifest.origin.differences(origin)):
        raise ExportMismatch(out, "; ".join(differences))
    kept = _agreeing_files(out, manifest, parts)
    bodies = {split: _body(rows, split, known, source) for split, rows in chosen.items()}
    out.mkdir(parents=True, exist_ok=True)
    written: dict[SplitName, Path] = {}
    for split, body in bodies.items():
        path = write_atomic(out / _file_name(split, known), body)
        written[split] = path
        kept[path.name] = ExportedFile(
            name=path.name, split=split, format=known, tasks=len(chosen[split]), sha256=file_sha256(path)
        )
    sizes = {split: len(parts[split]) for split in SPLITS}
    files = [kept[name] for name in sorted(kept)]
    write_manifest(out, ExportManifest(origin=origin, sizes=sizes, files=files))
    return written


def _agreeing_files(
    out: Path, manifest: ExportManifest | None, parts: Mapping[SplitName, Sequence[Row]]
) -> dict[str, ExportedFile]:
    """The export files already in `out`, by name, each vouched for by the manifest (its bytes as listed) or holding
    the tasks `parts` put under its split; `ExportMismatch` naming the first that does not."""
    where = {row.prompt_id: split for split, rows in parts.items() for row in rows}
    found: dict[str, ExportedFile] = {}
    for split in SPLITS:
        for suffix in dict.fromkeys(_SUFFIXES.values()):
            path = out / f"{split}{suffix}"
            if not path.is_file():
                continue
            digest = file_sha256(path)
            listed = manifest.listed(path.name) if manifest is not None else None
            if listed is not None and listed.sha256 == digest:
                found[path.name] = listed
                continue
            form, ids = _exported_ids(path)
            problem = _disagreement(ids, split, where, len(parts[split]))
            if problem is not None:
                raise ExportMismatch(out, f"{path.name} {problem}")
            found[path.name] = ExportedFile(name=path.name, split=split, format=form, tasks=len(ids), sha256=digest)
    return found


def _disagreement(ids: Sequence[str], split: SplitName, where: Mapping[str, SplitName], size: int) -> str | None:
    """How a file of `split` holding the tasks `ids` differs from that split as `where` assigns the tasks (None:
    it holds exactly the split's `size` tasks)."""
    elsewhere = Counter(where.get(prompt_id) for prompt_id in ids if where.get(prompt_id) != split)
    if elsewhere:
        said = [f"{elsewhere[other]} in {other}" for other in SPLITS if other in elsewhere]
        if None in elsewhere:
            said.append(f"{elsewhere[None]} not in the data")
        return (
            f"holds {elsewhere.total()} tasks these splits put elsewhere ({', '.join(said)}): it was split from "
            "other `data`, `heldout` rows or `split_seed`"
        )
    if len(set(ids)) != size:
        return f"holds {len(set(ids))} of the {size} tasks these splits put in {split}"
    return None


class _Line(BaseModel):
    """A line of an exported JSONL file, read for its task (`label` is OpenRLHF's copy of it)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    prompt_id: StrictStr
    label: StrictStr | None = None


def _exported_ids(path: Path) -> tuple[Format, list[str]]:
    """The format and the tasks (prompt_ids, in order) of a file `export` wrote; a `DataError` naming the file and
    why it is none."""
    try:
        if path.suffix == ".parquet":
            return "verl", _parquet_ids(path)
        lines = [line for _, line in read_jsonl(path, _Line)]
    except DataError as exc:
        raise DataError(
            f"{exc} (not a file `export` writes: move it out of the folder, or export into a new `out` folder)"
        ) from None
    form: Format = "openrlhf" if any(line.label is not None for line in lines) else "trl"
    return form, [line.prompt_id for line in lines]


def _parquet_ids(path: Path) -> list[str]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ModuleNotFoundError:
        raise MissingExtra("reading verl's parquet", "pyarrow", "train") from None
    try:
        truths = pq.read_table(path, columns=["reward_model"]).column("reward_model").to_pylist()
    except ValueError as exc:  # pyarrow's ArrowInvalid: not parquet, or no such column
        raise DataError(f"{path}: {str(exc).splitlines()[0]}") from None
    ids = [truth.get("ground_truth") if isinstance(truth, dict) else None for truth in truths]
    for number, prompt_id in enumerate(ids, start=1):
        if not isinstance(prompt_id, str):
            raise DataError(f"{path}: row {number}: field reward_model.ground_truth: expected the task's prompt_id")
    return [str(prompt_id) for prompt_id in ids]
