"""Who a served environment lets in, and how much it takes from them: the server's tokens, whether it may listen
where it was asked to, and the bounds on a request (its body, a reply, a group of candidates).

A server holds a grader key (or a grader that needs none) so that sessions without a key of their own can be
graded. Anyone who can reach it could spend that key, so the server listens on loopback unless told otherwise,
and beyond loopback it refuses to start without a token unless `--no-auth` says that is meant (the OpenReward
platform puts its own authentication in front). A token is a secret the clients send with every request; a
token file may hold several, one per line, one per user: each is a credential of its own, and a session belongs
to the credential that created it (`guard`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from healthbench.api.endpoint import is_openai
from healthbench.errors import SettingsError
from healthbench.grading.settings import GraderConfig

TOKEN_VARIABLE = "HEALTHBENCH_SERVER_TOKEN"
# `--no-auth` for a container whose command line is the image's (a platform's deployment sets only variables).
NO_AUTH_VARIABLE = "HEALTHBENCH_NO_AUTH"
# Shorter than this, a token can be guessed over the network; `secrets.token_urlsafe(32)` gives 43 characters.
MIN_TOKEN_CHARS = 16
MAKE_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
LOOPBACK = "127.0.0.1"

# The bounds on what one request may ask of the server. A reply of HealthBench is a few thousand characters; the
# longest conversation of the full set about twenty thousand. A group of 64 candidates of the longest reply
# allowed, each sent with such a conversation, is about 5 MB of JSON: the default body bound holds it.
MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_REPLY_CHARS = 50_000
# GRPO's groups: TRL's num_generations and the cookbook loops use 4 to 16, large runs up to 64.
MAX_GROUP_SIZE = 64
# A trainer's step through the batch routes (`/rewards`, `/openrlhf`): GRPO steps of 64 to 1,024 rollouts.
MAX_BATCH_SIZE = 1024
RequestBytes = Annotated[int, Field(ge=1024, le=1024 * 1024 * 1024)]
ReplyChars = Annotated[int, Field(ge=1, le=10_000_000)]
GroupSize = Annotated[int, Field(ge=1, le=4096)]
BatchSize = Annotated[int, Field(ge=1, le=65_536)]


class ServeLimits(BaseModel):
    """What one request may ask of a server: `request_bytes` of body (a larger one is refused with 413 before it
    is read whole), `reply_chars` of a reply to grade, `group_size` candidates in a `score_group`, `batch_size`
    replies in one request to a batch route (`/rewards`, `/openrlhf`). Each field is `serve`'s flag `--max-` and
    its name (`--max-reply-chars`), its type the flag's range, its default and description the flag's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_bytes: RequestBytes = Field(
        default=MAX_REQUEST_BYTES,
        description="A request body larger than this is refused (HTTP 413) before it is read.",
    )
    reply_chars: ReplyChars = Field(
        default=MAX_REPLY_CHARS, description="A reply longer than this (characters) fails without a grader call."
    )
    group_size: GroupSize = Field(
        default=MAX_GROUP_SIZE,
        description="Most candidates a score_group grades; a larger group fails without a grader call.",
    )
    batch_size: BatchSize = Field(
        default=MAX_BATCH_SIZE,
        description="Most replies one request to /rewards or /openrlhf grades (a trainer's step); a larger batch is "
        "refused (HTTP 413) without a grader call.",
    )


@dataclass(frozen=True)
class ServerTokens:
    """The tokens a server lets in, each a credential of its own (`token 1`, `token 2`, ... in file order).

    Only their digests are kept for checking; `secrets` keeps the tokens themselves so the log can be kept free
    of them."""

    digests: tuple[bytes, ...]
    secrets: tuple[str, ...]
    source: str

    @classmethod
    def of(cls, tokens: Iterable[str], source: str) -> ServerTokens:
        """The tokens given (each stripped), from `source` (what a message names); `SettingsError` for none, a
        short one, or one that cannot be sent in an HTTP header."""
        found = tuple(token.strip() for token in tokens)
        if not found:
            raise SettingsError(f"{source}: no token in it (one a line; make one with {MAKE_TOKEN})")
        for number, token in enumerate(found, 1):
            where = source if len(found) == 1 else f"{source}, token {number}"
            if len(token) < MIN_TOKEN_CHARS:
                raise SettingsError(
                    f"{where}: a token of {len(token)} characters is too easily guessed; use at least "
                    f"{MIN_TOKEN_CHARS} (make one with {MAKE_TOKEN})"
                )
            if not token.isascii() or not token.isprintable() or " " in token:
                raise SettingsError(f"{where}: a token is printable ASCII without spaces, as an HTTP header takes")
        if len(set(found)) != len(found):
            raise SettingsError(f"{source}: a token is given twice; each line is a credential of its own")
        return cls(tuple(_digest(token) for token in found), found, source)

    @classmethod
    def load(cls, path: Path | None, environ: Mapping[str, str]) -> ServerTokens | None:
        """The tokens of the file at `path` (one a line; blank lines and lines starting with # skipped), else of
        `HEALTHBENCH_SERVER_TOKEN` in `environ`; None when neither is given."""
        if path is not None:
            lines = path.read_text(encoding="utf-8").splitlines()
            return cls.of([line for line in lines if line.strip() and not line.lstrip().startswith("#")], str(path))
        value = environ.get(TOKEN_VARIABLE, "")
        return cls.of([value], TOKEN_VARIABLE) if value.strip() else None

    def credential(self, presented: str | None) -> str | None:
        """The credential `presented` is (`token N`), or None when it is none of them. Every token is compared,
        in constant time, whatever matches: how long a refusal takes says nothing about the tokens."""
        if presented is None:
            return None
        digest = _digest(presented.strip())
        found = None
        for number, known in enumerate(self.digests, 1):
            if hmac.compare_digest(digest, known) and found is None:
                found = f"token {number}"
        return found


def _digest(token: str) -> bytes:
    # Compared as digests: equal lengths whatever was sent, so the comparison's time does not depend on it.
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or `localhost`: reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def own_grading(graders: Iterable[GraderConfig]) -> str | None:
    """What a server with these graders spends on a session that brings no key, or None when such a session is
    never graded: its own key, or a grader that is not OpenAI's API (a local or self-hosted one, which may need no
    key, and is the server's to spend too)."""
    configs = list(graders)
    if any(config.api_key is not None for config in configs):
        return "a grader key of its own"
    keyless = [config.base_url for config in configs if not is_openai(config.base_url)]
    return f"its grader at {keyless[0]}, which needs no key" if keyless else None


@dataclass(frozen=True)
class Access:
    """How a server lets clients in: where it listens, its tokens (None: everyone who reaches it), and whether
    `--no-auth` said that no token is meant."""

    host: str = LOOPBACK
    tokens: ServerTokens | None = None
    no_auth: bool = False

    def refusal(self, graders: Iterable[GraderConfig]) -> str | None:
        """Why the server must not start so, in one line naming the ways out, or None when it may."""
        if self.no_auth and self.tokens is not None:
            return f"--no-auth and a token ({self.tokens.source}) together: give one of them"
        if self.tokens is not None or self.no_auth or is_loopback(self.host):
            return None
        spent = own_grading(graders)
        if spent is None:
            return None  # every session brings and spends its own key
        return (
            f"not listening on {self.host} without a token: this server grades with {spent}, which anyone who "
            "reaches it could spend. Give a token (--auth-token-file FILE or "
            f"{TOKEN_VARIABLE}), listen on loopback (--host {LOOPBACK}, the default), or pass --no-auth "
            f"({NO_AUTH_VARIABLE}=1) if the network in front of it lets only your clients in (the OpenReward "
            "platform's does)"
        )

    def warnings(self) -> list[str]:
        """What the server says at start about who it lets in, one line each."""
        if self.no_auth:
            return [
                f"--no-auth: every request that reaches {self.host} is served without a token; the network in front "
                "of it must keep strangers out"
            ]
        if self.tokens is None and not is_loopback(self.host):
            return [f"no token: every request that reaches {self.host} is served (graded with the key it brings)"]
        return []
