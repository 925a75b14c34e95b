"""A tiny policy for trainer tests and benchmarks: a one-layer Qwen3 whose weights are set by hand, built and saved
locally (nothing is downloaded), whose every reply is one call to the `answer` tool with a reply it is given.

It is a bigram model: its attention and MLP outputs are zero, so the residual stream at each position is its own
token's embedding, and the next token depends on the last one alone. Every ordinary token shares one embedding,
which the output layer maps to `<tool_call>`; `<tool_call>` maps to one added token holding the call's JSON, that
to `</tool_call>`, and that to `<|im_end|>`, the end of the turn. A sampled reply is therefore always the same
four tokens, at any temperature a trainer uses, and TRL parses them as a call of `answer(response=...)` since the
chat template is its own copy of Qwen3's. The tokenizer is byte-level with no merges (any text encodes).

Needs torch, transformers, tokenizers and trl (for the template): `scripts/dev` installs them in `.venv-clients`.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

# Large enough that a sampled reply is the chain at any temperature up to a few.
_LOGIT = 60.0
_WIDTH = 8


def _module(name: str) -> Any:
    return importlib.import_module(name)


def tiny_policy(folder: Path, reply: str) -> Path:
    """Build the policy and its tokenizer into `folder` (for `from_pretrained`); its every reply calls
    `answer(response=reply)`. Returns `folder`."""
    torch, tokenizers, transformers = _module("torch"), _module("tokenizers"), _module("transformers")
    template = (Path(_module("trl").__file__).parent / "chat_templates" / "qwen3.jinja").read_text(encoding="utf-8")
    byte_level = tokenizers.pre_tokenizers.ByteLevel
    vocab = {symbol: index for index, symbol in enumerate(sorted(byte_level.alphabet()))}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = byte_level(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    call = "\n" + json.dumps({"name": "answer", "arguments": {"response": reply}}) + "\n"
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    plain = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>", call]
    added = tokenizers.AddedToken
    tokenizer.add_special_tokens([added(token, special=True, normalized=False) for token in special])
    tokenizer.add_tokens([added(token, special=False, normalized=False) for token in plain])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = template
    fast.save_pretrained(folder)

    chain = [fast.convert_tokens_to_ids(token) for token in ("<tool_call>", call, "</tool_call>", "<|im_end|>")]
    config = transformers.Qwen3Config(
        vocab_size=len(fast),
        hidden_size=_WIDTH,
        intermediate_size=2 * _WIDTH,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=_WIDTH // 2,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=chain[-1],
        pad_token_id=fast.pad_token_id,
    )
    model = transformers.Qwen3ForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embeddings, head = model.model.embed_tokens.weight, model.lm_head.weight
        embeddings.zero_()
        head.zero_()
        # Direction 0 is every ordinary token; direction k + 1 is the chain's k-th token.
        embeddings[:, 0] = 1.0
        for rank, token in enumerate(chain[:-1]):
            embeddings[token].zero_()
            embeddings[token, rank + 1] = 1.0
        # The final norm scales a unit direction to sqrt(width): divide it out of the logit.
        scale = _LOGIT / _WIDTH**0.5
        for rank, token in enumerate(chain):
            head[token, rank] = scale
    model.generation_config.eos_token_id = chain[-1]
    model.generation_config.pad_token_id = fast.pad_token_id
    model.save_pretrained(folder)
    return folder
