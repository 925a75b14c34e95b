"""vLLM's automatic prefix caching as the fake plays it, per server: which requests find the prefix they share with
their siblings already computed, counted as vLLM counts it (queried and cached tokens: ``vllm:prefix_cache_queries``
and ``vllm:prefix_cache_hits``) and in requests.

A request's shared prefix is the part of its input its siblings have too. For a grader prompt (per item or per
reply: ``GRADER_MARKER`` is in both headings) it is the input up to the rubric item: the system message if any, the
template's head and the conversation, which a reply's ~11 item prompts all begin with. For any other request it is
the whole input (the same prompt sampled again). A request hits when this server has served that prefix before;
it then reads the prefix's tokens from the cache in vLLM's full blocks of 16 tokens, never its whole prompt (vLLM
computes the last token again). A request is counted when it enters service, so of a reply's items sent to one
server the first misses and the others hit, whenever they come.

The fake's simplifications: a miss reads nothing, though on vLLM it would read the few blocks of the template's
head that every grader prompt shares; nothing is evicted (vLLM's cache is LRU, bounded by the GPU's memory).
Tokens are counted as everywhere in the fake (four characters a token).
"""

from __future__ import annotations

import hashlib

from healthbench.testing.endpoints import Prompt
from healthbench.testing.replies import GRADER_MARKER, estimate_tokens

__all__ = ["BLOCK_TOKENS", "PrefixCache", "shared_prefix"]

BLOCK_TOKENS = 16  # vLLM's default block size: only full blocks are cached
_CHARS_PER_TOKEN = 4


def shared_prefix(prompt: Prompt) -> str:
    """The part of ``prompt``'s input its siblings share: see the module docstring."""
    if prompt.grader_prompt is None:
        return prompt.input_text
    return prompt.input_text[: prompt.input_text.rfind(GRADER_MARKER)]


class PrefixCache:
    """One server's cached prefixes and its counters: ``queries`` and ``hits`` in requests, ``query_tokens`` and
    ``hit_tokens`` in tokens (what vLLM's counters count)."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self.reset()

    def reset(self) -> None:
        """Forget every cached prefix and zero the counters."""
        self._seen.clear()
        self.queries = 0
        self.hits = 0
        self.query_tokens = 0
        self.hit_tokens = 0

    def query(self, prompt: Prompt) -> bool:
        """Count ``prompt`` coming into service, cache its shared prefix, and say whether it was cached already."""
        prefix = shared_prefix(prompt)
        # A digest, not the text: a long-lived judge sees thousands of conversations.
        key = hashlib.blake2b(prefix.encode(), digest_size=16).digest()
        hit = key in self._seen
        self._seen.add(key)
        tokens = estimate_tokens(prompt.input_chars)
        self.queries += 1
        self.query_tokens += tokens
        if hit:
            self.hits += 1
            cached = min(len(prefix) // _CHARS_PER_TOKEN, tokens - 1)
            self.hit_tokens += cached // BLOCK_TOKENS * BLOCK_TOKENS
        return hit
