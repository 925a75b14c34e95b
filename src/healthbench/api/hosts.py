"""What a host refuses of the parameters this project adds to the reference's requests, met once per endpoint.

The reference asks its grader with `model`, `messages`, `temperature` and `max_tokens` (Chat Completions), and a
reasoning model with `model`, `input` and `reasoning` (the Responses API). This project adds, beyond those:

- `prompt_cache_key`, on every grader request unless turned off: it routes requests to a prompt cache and decides
  no verdict, so a host that refuses it gets the requests without it;
- `reasoning_effort`, a reasoning model's effort said the Chat Completions way (the Responses API's
  `reasoning.effort`): a host that refuses it gets the requests without it, and its model thinks as it does;
- `max_completion_tokens`, a reasoning model's output cap in Chat Completions: a host that refuses it gets the
  same cap as `max_tokens`, the name every compatible server takes.

vLLM, SGLang, Ollama, llama.cpp's server and OpenRouter ignore fields they do not know. Others refuse them with a
4xx that names the field: Azure OpenAI ("Unrecognized request argument supplied: prompt_cache_key", as OpenAI
once did), OpenAI ("Unsupported parameter: 'x'", "Unknown parameter: 'x'"), Groq and Cerebras ("property 'x' is
unsupported"), pydantic-validated servers such as Mistral's and Azure AI's model inference ("Extra inputs are not
permitted" at the field), and Rust servers such as text-generation-inference ("unknown field `x`"). Such a refusal
of a parameter this project added is met once per endpoint (`Adaptations`): the parameter is left out (or renamed)
for the rest of the run, one line says so, and the refused request is sent again, which is no failed attempt. Until
the endpoint has answered once, one request carrying an added parameter goes out alone, so a host that refuses one
costs one request, not one per request in flight. Meanwhile the others wait for its answer, except those whose added
parameters decide no answer (`prompt_cache_key` alone): they do not wait, and those that go while it is still out go
without it, so a step's first burst of grader calls costs one round and not two. A refusal of a parameter the
reference sends is never met this way: it stops the run, naming the parameter.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping

from healthbench.api.failures import ProviderError, refused_parameter

log = logging.getLogger("healthbench.api")

ADDED: Mapping[str, str | None] = {
    "prompt_cache_key": None,
    "reasoning_effort": None,
    "max_completion_tokens": "max_tokens",
}
"""The parameters this project adds to the reference's requests, and what a host that refuses one gets instead: the
same value under another name, or (None) nothing."""

DECIDING_NOTHING = frozenset({"prompt_cache_key"})
"""The added parameters that decide no verdict: a request may go without them while the host is not known to take
them."""

REFERENCE_PARAMETERS = frozenset({"model", "messages", "temperature", "max_tokens", "input", "reasoning"})
"""What the reference's requests carry: a host that refuses one of these cannot grade as the reference does."""


def _key(name: str) -> bytes:
    """How a body's top-level key `name` starts in `json.dumps`'s bytes: no JSON string holds these bytes (a quote
    inside one is escaped), so finding them finds the key."""
    return f'"{name}": '.encode()


class Adaptations:
    """What one endpoint refuses of `ADDED`, as learned during a run, shared by every request its client sends; see
    the module's docstring. `where` names the endpoint in the line said when something is learned."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.changes: dict[str, str | None] = {}
        self.settled = False  # the endpoint answered a request other than by refusing an added parameter
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def carried(self, payload: bytes) -> list[str]:
        """The added parameters a request's bytes carry."""
        return [name for name in ADDED if _key(name) in payload]

    def apply(self, payload: bytes) -> bytes:
        """A request's bytes as this endpoint takes them: what it refused left out or renamed."""
        return _rewritten(payload, self.changes)

    async def turn(self, payload: bytes) -> asyncio.Lock | None:
        """Wait for this request's turn. Until the endpoint has answered, a request carrying an added parameter goes
        alone (the lock returned, for the caller to release once answered), unless another is out alone and its
        added parameters decide nothing: then it does not wait, and `outgoing` says what it carries. After that, or
        without one, at once."""
        if self.settled:
            return None
        carried = self.carried(payload)
        if not carried:
            return None
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._lock, self._loop = asyncio.Lock(), loop
        lock = self._lock
        if lock.locked() and DECIDING_NOTHING.issuperset(carried):
            return None
        await lock.acquire()
        if self.settled:
            lock.release()
            return None
        return lock

    def outgoing(self, payload: bytes, alone: bool) -> bytes:
        """A request's bytes as it goes, decided then rather than at its turn (a slow start may hold it until the
        host is known): as this endpoint takes them, and, while the host is not known yet and another request is out
        alone, without the added parameters that decide nothing."""
        if alone or self.settled:
            return self.apply(payload)
        return _rewritten(payload, {**self.changes, **dict.fromkeys(DECIDING_NOTHING)})

    def learn(self, status: int | None, body: bytes, sent: bytes) -> bool:
        """Whether the refusal (`status`, `body`) of the request `sent` is of an added parameter it carried, now left
        out for this endpoint (one line says so the first time): if so, the request goes again as `apply` makes it.
        Otherwise the endpoint has answered, and requests no longer wait their turn."""
        name = refused_parameter(status, body)
        if name is None or name not in ADDED or name not in self.carried(sent):
            self.settled = True
            return False
        if name not in self.changes:
            renamed = ADDED[name]
            self.changes[name] = renamed
            instead = f"as {renamed} instead" if renamed is not None else f"without {name}"
            message = ProviderError.parse(status, body).message or body.decode("utf-8", "replace")
            said = " ".join(message.split())[:200]
            log.warning(
                "%s refuses the parameter %s, which the reference's request does not carry (HTTP %s: %s); its "
                "requests go %s from now on",
                self.where,
                name,
                status,
                said,
                instead,
            )
        return True


def _rewritten(payload: bytes, changes: Mapping[str, str | None]) -> bytes:
    """`payload` with each key of `changes` left out (None) or renamed (unless the new name is there already)."""
    if not changes or not any(_key(name) in payload for name in changes):
        return payload
    body = json.loads(payload)
    adapted = {}
    for key, value in body.items():
        if key not in changes:
            adapted[key] = value
        elif (renamed := changes[key]) is not None and renamed not in body:
            adapted[renamed] = value
    return json.dumps(adapted).encode()
