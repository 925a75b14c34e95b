"""OpenAI's prompt caching as the fake plays it, so a client's cached-token accounting can be tested.

Only a request that carries a ``prompt_cache_key`` is cached (the fake's simplification: OpenAI may also hit
without one, by chance of routing). The first request of a key writes its prompt; a later one of the same key
reads the prefix it shares with that prompt, if that is 1,024 tokens or more, in steps of 128 tokens past
1,024, as OpenAI bills it (a token being four characters here, as everywhere in the fake).
"""

from __future__ import annotations

from typing import Any

from healthbench.testing.replies import Body

__all__ = ["MIN_CACHED_TOKENS", "PromptCache"]

MIN_CACHED_TOKENS = 1024
_STEP = 128
_CHARS_PER_TOKEN = 4


def _shared(a: str, b: str) -> int:
    """The length of the longest common prefix of two strings."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # by halving: prompts run to tens of thousands of characters
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class PromptCache:
    """The prompts cached by key (the first of each key's), for the fake's server and its batches."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}

    def reset(self) -> None:
        """Forget every cached prompt."""
        self._first.clear()

    def cached_tokens(self, body: Body, text: str) -> int:
        """The tokens of ``text`` (the request's input) read from the cache; the first request of a key writes it."""
        key: Any = body.get("prompt_cache_key") if isinstance(body, dict) else None
        if not isinstance(key, str):
            return 0
        first = self._first.get(key)
        if first is None:
            self._first[key] = text
            return 0
        tokens = _shared(first, text) // _CHARS_PER_TOKEN
        if tokens < MIN_CACHED_TOKENS:
            return 0
        return MIN_CACHED_TOKENS + (tokens - MIN_CACHED_TOKENS) // _STEP * _STEP
