"""OpenRLHF 0.11.2's own remote reward client against `healthbench serve`'s `/openrlhf`, with the token in the URL as
`--reward.remote_url` carries it.

The path run is OpenRLHF's: its `SingleTurnAgentExecutor.execute` tokenizes the prompt, takes the rollout, decodes
prompt and reply with the special tokens (`<|im_end|>` ending it) and posts `{"query", "prompts", "labels"}` to the
URL, one sample a request, retrying as it does; the reward it keeps is what the server answered. The prompts are
made as OpenRLHF's `preprocess_data` makes them with `--apply_chat_template` (the chat template applied to the
row's messages, with the generation prompt), from rows as `healthbench export --format openrlhf` writes them (chat
messages under `prompt`, the prompt_id under `prompt_id`): that module is not imported, since it needs `datasets`,
which the reward client does not. Only the generation is scripted (OpenRLHF's engine is vLLM on a GPU): an object
with vLLM's `generate` answering each prompt with its reply's tokens. The tokenizer is a byte-level one made here
with ChatML's special tokens (nothing is downloaded).

Sixteen rollouts at once, one request each, get `healthbench grade`'s rewards for the same replies; a rollout
whose reply cannot be graded, or whose label is no task, is left without a reward, as OpenRLHF leaves one whose
request failed.

Needs openrlhf (installed without its GPU dependencies), torch and transformers: `scripts/dev` makes
`.venv-openrlhf` for this file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from healthbench.data.schema import Row
from healthbench.data.splits import split_rows
from healthbench.testing import FakeOpenAI
from tests.conftest import Serving
from tests.reference import KEY, made_up_rows
from tests.serving import UNGRADABLE, graded_by_cli

# Imported as modules of no type: mypy runs where none of them is installed.
agent: Any = pytest.importorskip("openrlhf.utils.agent")
tokenizers: Any = pytest.importorskip("tokenizers")
transformers: Any = pytest.importorskip("transformers")
pytest.importorskip("openreward")

ROWS = made_up_rows()[:21]
# The 16 of them in the train split `serve` serves beside `test`, where `/openrlhf` looks labels up by default.
TRAIN_IDS = {row.prompt_id for row in split_rows([Row.model_validate(row) for row in ROWS], "train")}
TRAIN = [row for row in ROWS if row["prompt_id"] in TRAIN_IDS]
TOKEN = "token-o-5f0c1e9d8b7a6f5e4d3c2b1a"
SERVING = Serving(token_file=TOKEN + "\n", env={"HEALTHBENCH_GRADER_API_KEY": KEY})
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chatml_tokenizer() -> Any:
    """A byte-level tokenizer without merges (any text encodes, and decodes back to itself) with ChatML's special
    tokens and template, as a Qwen model's has them."""
    byte_level = tokenizers.pre_tokenizers.ByteLevel
    vocab = {symbol: index for index, symbol in enumerate(sorted(byte_level.alphabet()))}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = byte_level(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokenizer.add_special_tokens([tokenizers.AddedToken(token, special=True, normalized=False) for token in special])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    return fast


class ScriptedEngine:
    """Stands in for OpenRLHF's vLLM engine: answers each prompt (by its text) with its scripted reply, ended by
    `<|im_end|>` as a chat model's generation is."""

    def __init__(self, tokenizer: Any, replies: dict[str, str]) -> None:
        self.tokenizer = tokenizer
        self.replies = replies

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        prompt = self.tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
        text = self.replies[prompt] + "<|im_end|>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        output = SimpleNamespace(token_ids=ids, text=text, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


def remote_rm_url(url: str) -> str:
    """`--reward.remote_url` for the server: the token as the URL's password."""
    return url.replace("http://", f"http://trainer:{TOKEN}@") + "/openrlhf"


def exported(row: dict[str, Any], prompt_id: str | None = None) -> dict[str, Any]:
    """A row as `export --format openrlhf` writes it: the conversation as chat messages, and the prompt_id."""
    messages = [{"role": turn["role"], "content": turn["content"]} for turn in row["prompt"]]
    return {"prompt": messages, "prompt_id": prompt_id or row["prompt_id"]}


async def rollouts(url: str, rows: list[dict[str, Any]], replies: list[str]) -> list[dict[str, Any]]:
    """Each row's rollout as OpenRLHF's single-turn executor makes it, all at once: its output (`reward` included)."""
    tokenizer = chatml_tokenizer()
    # What OpenRLHF's preprocess_data does with --input_key prompt --label_key prompt_id --apply_chat_template.
    made = [
        (tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True), row["prompt_id"])
        for row in rows
    ]
    engine = ScriptedEngine(tokenizer, {prompt: reply for (prompt, _), reply in zip(made, replies, strict=True)})
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=remote_rm_url(url))
    sampling = SimpleNamespace(max_tokens=None, logprobs=None)
    return list(
        await asyncio.gather(
            *(executor.execute(prompt, label, sampling, 1_000_000, tokenizer, engine) for prompt, label in made)
        )
    )


def test_sixteen_rollouts_at_once_get_grades_rewards(
    url: str, module_fake: FakeOpenAI, data: Path, tmp_path: Path
) -> None:
    rows = TRAIN
    assert len(rows) == 16
    replies = [f"Rest and fluids ({row['prompt_id']}); see a doctor if it gets worse.\n" for row in rows]
    module_fake.reset()
    outputs = asyncio.run(rollouts(url, [exported(row) for row in rows], replies))
    assert module_fake.base_url
    graded = graded_by_cli(
        tmp_path,
        data,
        {row["prompt_id"]: reply for row, reply in zip(rows, replies, strict=True)},
        module_fake.base_url,
    )
    for row, output in zip(rows, outputs, strict=True):
        assert output["label"] == row["prompt_id"]
        [reward] = output["reward"]
        assert reward == pytest.approx(graded[row["prompt_id"]]["score"], abs=1e-9)
        assert output["scores"] == output["reward"]
        assert any(key.startswith("axis:") for key in output["extra_logs"])
    calls = sum(len(row["rubrics"]) for row in rows)
    assert module_fake.requests_total == 2 * calls  # the server's, then grade's: one grader call per rubric item each


def test_an_ungradable_reply_or_an_unknown_label_gets_no_reward(url: str) -> None:
    rows = [exported(TRAIN[0]), exported(TRAIN[1], prompt_id="no-such-task"), exported(TRAIN[2])]
    replies = ["Rest.", "Rest.", f"{UNGRADABLE} reply"]
    first, unknown, ungradable = asyncio.run(rollouts(url, rows, replies))
    assert first["reward"] is not None
    assert unknown["reward"] is None and unknown["scores"] is None and unknown["extra_logs"] == {}
    assert ungradable["reward"] is None and ungradable["scores"] is None
