"""verl 0.9.1 with HealthBench's reward file (`integrations.verl`), loaded by verl itself from its path as
`custom_reward_function.path` names it: verl's batch reward manager (`verl.workers.reward_manager.batch`) and its
reward-loop worker (`verl.experimental.reward_loop`, the default of 0.9.1's trainer) each run on a `DataProto` made
from `export --format verl`'s parquet (`data_source`, `prompt`, `ability`, `reward_model.ground_truth` = the
prompt_id, `extra_info` naming the data and split). Every score is `healthbench grade`'s for the same reply; an
ungradable reply and a prompt_id outside the split are errors, never a score.

Runs where verl is installed (`.venv-verl`, made by `scripts/dev test`: verl's pins collide with TRL's).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from healthbench.data.loading import load_rows
from healthbench.data.source import TaskSource
from healthbench.data.splits import assign_splits
from healthbench.errors import GradingError, SettingsError, UnknownPromptId
from healthbench.integrations.export import export_split
from healthbench.integrations.rewards import close_graders
from healthbench.testing import FakeOpenAI
from tests.conftest import make_row, write_jsonl
from tests.serving import UNGRADABLE, graded_by_cli

verl = pytest.importorskip("verl")
torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")
OmegaConf = pytest.importorskip("omegaconf").OmegaConf

REPLIES = ("Rest and fluids; see a doctor if it lasts.", "Take ibuprofen as the label says and rest.")


def reward_file() -> str:
    """The path `python -m healthbench.integrations.verl` prints, as a user puts it in verl's config."""
    found = subprocess.run(
        [sys.executable, "-m", "healthbench.integrations.verl"], capture_output=True, text=True, check=True
    )
    path = found.stdout.strip()
    assert Path(path).is_file() and path.endswith("integrations/verl.py")
    return path


def tokenizer(folder: Path) -> Any:
    """A byte-level tokenizer with no merges (any text encodes and decodes back exactly), saved in `folder`."""
    tokenizers, transformers = importlib.import_module("tokenizers"), importlib.import_module("transformers")
    byte_level = tokenizers.pre_tokenizers.ByteLevel
    vocab = {symbol: index for index, symbol in enumerate(sorted(byte_level.alphabet()))}
    model = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    model.pre_tokenizer = byte_level(add_prefix_space=False, use_regex=False)
    model.decoder = tokenizers.decoders.ByteLevel()
    model.add_special_tokens([tokenizers.AddedToken("<|pad|>", special=True, normalized=False)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<|pad|>", eos_token="<|pad|>")
    fast.save_pretrained(folder)
    return fast


def exported(tmp: Path) -> tuple[Path, Path, list[str], str]:
    """Rows (one whose prompt no grader answers about), their train split written by `export --format verl`'s own
    writer, two train prompt_ids (the good one first, then the ungradable one) and a heldout prompt_id."""
    raw = [make_row(f"task-{i}", prompt=(("user", f"Question {i}: my back hurts."),)) for i in range(12)]
    splits = assign_splits(load_rows(write_jsonl(tmp / "probe.jsonl", raw)))
    train = [row["prompt_id"] for row in raw if splits[row["prompt_id"]] == "train"][:2]
    heldout = next(row["prompt_id"] for row in raw if splits[row["prompt_id"]] == "heldout")
    for row in raw:
        if row["prompt_id"] == train[1]:
            row["prompt"] = [{"role": "user", "content": f"{UNGRADABLE}: my back hurts."}]
    data = write_jsonl(tmp / "rows.jsonl", raw)
    rows = [row for row in load_rows(data) if splits[row.prompt_id] == "train"]
    parquet = export_split(rows, "train", "verl", tmp / "verl", TaskSource.file(data))
    return data, parquet, train, heldout


def batch(parquet: Path, pairs: list[tuple[str, str]], tok: Any, ground_truth: str | None = None) -> Any:
    """A `DataProto` as verl's rollout leaves it: for each (prompt_id, reply), the prompt's and the reply's token ids
    (right-padded), the attention mask, and the non-tensor columns of the parquet's row of that task."""
    frame = pd.read_parquet(parquet)
    where = {str(info["prompt_id"]): index for index, info in enumerate(frame["extra_info"])}
    replies = [(where[pid], reply) for pid, reply in pairs]
    prompts = [tok(str(frame.iloc[i]["prompt"][-1]["content"]))["input_ids"] for i, _ in replies]
    answers = [tok(reply)["input_ids"] for _, reply in replies]
    width_p, width_r = max(map(len, prompts)), max(map(len, answers))
    pad = tok.pad_token_id

    def padded(ids: list[int], width: int, left: bool) -> list[int]:
        fill = [pad] * (width - len(ids))
        return fill + ids if left else ids + fill

    prompt_ids = torch.tensor([padded(p, width_p, True) for p in prompts])
    response_ids = torch.tensor([padded(r, width_r, False) for r in answers])
    mask = torch.tensor(
        [
            [0] * (width_p - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (width_r - len(r))
            for p, r in zip(prompts, answers, strict=True)
        ]
    )
    reward_model = [dict(frame.iloc[i]["reward_model"]) for i, _ in replies]
    if ground_truth is not None:
        reward_model[-1]["ground_truth"] = ground_truth
    return verl.DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
            "attention_mask": mask,
        },
        non_tensors={
            "data_source": np.array([frame.iloc[i]["data_source"] for i, _ in replies], dtype=object),
            "reward_model": np.array(reward_model, dtype=object),
            "extra_info": np.array([dict(frame.iloc[i]["extra_info"]) for i, _ in replies], dtype=object),
        },
    )


def config(
    path: str, name: str, tokenizer_path: Path, manager: str = "naive", settings: dict[str, Any] | None = None
) -> Any:
    """The parts of verl's trainer config its reward code reads (verl/trainer/config/ppo_trainer.yaml's names);
    `settings` the reward's `reward_kwargs` (else `grader_max_attempts=2`)."""
    kwargs = settings if settings is not None else {"grader_max_attempts": 2}
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": str(tokenizer_path), "tokenizer_path": None}},
            "reward": {
                "custom_reward_function": {"path": path, "name": name, "reward_kwargs": kwargs},
                "reward_manager": {"name": manager, "source": "register"},
                "reward_model": {"enable": False},
            },
        }
    )


def expected(tmp: Path, data: Path, pid: str, grader: FakeOpenAI) -> list[float]:
    """`healthbench grade`'s score for each of `REPLIES` to task `pid`."""
    assert grader.base_url
    return [
        graded_by_cli(tmp, data, {pid: reply}, grader.base_url, out=f"grade{n}")[pid]["score"]
        for n, reply in enumerate(REPLIES)
    ]


def test_the_batch_reward_manager_scores_a_batch_as_grade(grader: FakeOpenAI, tmp_path: Path) -> None:
    get_custom_reward_fn = importlib.import_module("verl.trainer.ppo.reward").get_custom_reward_fn
    batch_manager = importlib.import_module("verl.workers.reward_manager.batch").BatchRewardManager

    data, parquet, train, heldout = exported(tmp_path)
    tok = tokenizer(tmp_path / "tokenizer")
    compute = get_custom_reward_fn(config(reward_file(), "compute_score_batch", tmp_path / "tokenizer"))
    manager = batch_manager(tok, num_examine=0, compute_score=compute)
    replies = [(train[0], reply) for reply in REPLIES] * 4  # eight replies to the good task: a GRPO group
    result = manager(batch(parquet, replies, tok), return_dict=True)
    rewards = result["reward_tensor"].sum(dim=1).tolist()
    scores = expected(tmp_path, data, train[0], grader)
    assert rewards == pytest.approx(scores * 4, abs=1e-6)  # verl's tensor is float32
    # Before the ungradable batch, whose cancelled requests may still reach the fake after it raises.
    sent = grader.requests_total
    with pytest.raises(UnknownPromptId, match=rf"{heldout}.*'train'"):
        manager(batch(parquet, [(train[0], REPLIES[0]), (train[0], REPLIES[1])], tok, ground_truth=heldout))
    assert grader.requests_total == sent
    with pytest.raises(GradingError, match=rf"task {train[1]}: rubric item"):
        manager(batch(parquet, [(train[0], REPLIES[0]), (train[1], REPLIES[0])], tok))


def test_the_reward_loop_worker_scores_each_reply_as_grade(grader: FakeOpenAI, tmp_path: Path) -> None:
    reward_loop_worker = importlib.import_module("verl.experimental.reward_loop.reward_loop").RewardLoopWorker

    data, parquet, train, heldout = exported(tmp_path)
    tok = tokenizer(tmp_path / "tokenizer")
    worker = reward_loop_worker(config(reward_file(), "compute_score", tmp_path / "tokenizer"))
    replies = [(train[0], reply) for reply in REPLIES] * 4

    async def scored(proto: Any) -> list[dict[str, Any]]:
        return list(await worker.compute_score_batch(proto))

    outputs = worker.loop.run_until_complete(scored(batch(parquet, replies, tok)))
    scores = expected(tmp_path, data, train[0], grader)
    assert [output["reward_score"] for output in outputs] == pytest.approx(scores * 4, abs=1e-9)
    with pytest.raises(GradingError, match=rf"task {train[1]}: rubric item"):
        worker.loop.run_until_complete(scored(batch(parquet, [(train[1], REPLIES[0])], tok)))
    with pytest.raises(UnknownPromptId, match=rf"{heldout}.*'train'"):
        worker.loop.run_until_complete(scored(batch(parquet, [(train[0], REPLIES[0])], tok, ground_truth=heldout)))
    worker.loop.run_until_complete(close_graders())  # a Ray worker's loop lives as long as its process


def test_a_misspelled_reward_kwarg_is_refused_naming_it_before_any_grader_call(
    grader: FakeOpenAI, tmp_path: Path
) -> None:
    """verl's own loader and managers hand the file `reward_kwargs` as they are: a misspelling is refused with
    TRL's words, where verl 0.9.1 used to ignore it and grade with the default."""
    get_custom_reward_fn = importlib.import_module("verl.trainer.ppo.reward").get_custom_reward_fn
    batch_manager = importlib.import_module("verl.workers.reward_manager.batch").BatchRewardManager
    reward_loop_worker = importlib.import_module("verl.experimental.reward_loop.reward_loop").RewardLoopWorker

    _, parquet, train, _ = exported(tmp_path)
    tok = tokenizer(tmp_path / "tokenizer")
    misspelled = {"grader_modle": "gpt-4.1-2025-04-14"}
    said = r"`grader_modle` is no setting of the reward \(did you mean `grader_model`\?\)"
    path = reward_file()
    compute = get_custom_reward_fn(config(path, "compute_score_batch", tmp_path / "tokenizer", settings=misspelled))
    manager = batch_manager(tok, num_examine=0, compute_score=compute)
    with pytest.raises(SettingsError, match=said):
        manager(batch(parquet, [(train[0], REPLIES[0])], tok))
    worker = reward_loop_worker(config(path, "compute_score", tmp_path / "tokenizer", settings=misspelled))

    async def scored(proto: Any) -> list[dict[str, Any]]:
        return list(await worker.compute_score_batch(proto))

    with pytest.raises(SettingsError, match=said):
        worker.loop.run_until_complete(scored(batch(parquet, [(train[0], REPLIES[0])], tok)))
    assert grader.requests_total == 0
