"""A grader's thinking, written before its verdict in the answer itself, set aside.

Reasoning models served without a reasoning parser (Qwen3, DeepSeek-R1 and its distills on vLLM, SGLang, Ollama
or llama.cpp's server) write their thinking into the answer as `<think>...</think>` before the verdict; a chat
template that opens the block in the prompt leaves only its closing tag in the answer. The reference parses the
whole answer as JSON, and no answer it parses holds a think block (`</think>` outside a JSON string is not JSON),
so the verdict is looked for after the thinking only when the whole answer is not JSON: gpt-4.1's answers are read
exactly as the reference reads them.
"""

from __future__ import annotations

from collections.abc import Iterator

OPEN = "<think>"
CLOSE = "</think>"


def after_thinking(text: str) -> Iterator[str]:
    """What may follow the thinking in `text`, first the likeliest: after each `</think>` in turn (a verdict's
    explanation may quote the tag, and so may the thinking); nothing when the answer has no closing tag."""
    start = 0
    while (found := text.find(CLOSE, start)) >= 0:
        start = found + len(CLOSE)
        yield text[start:]


def still_thinking(text: str) -> bool:
    """Whether `text` is thinking that never ended: it opens a think block and never closes it (the output cap ran
    out inside it, say)."""
    return text.lstrip().startswith(OPEN) and CLOSE not in text
