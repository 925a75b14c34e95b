"""`serve`'s flags about who it lets in and how much a request may ask: where it listens, its tokens, and the
bounds on a request's body, a reply and a group."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from healthbench.cli.bounds import bounded
from healthbench.cli.options import options
from healthbench.integrations.openreward.access import (
    LOOPBACK,
    NO_AUTH_VARIABLE,
    TOKEN_VARIABLE,
    Access,
    ServeLimits,
    ServerTokens,
)


def limit_flag(name: str) -> str:
    """`serve`'s flag of the `ServeLimits` field `name`: `--max-reply-chars` for `reply_chars`."""
    return f"--max-{name.replace('_', '-')}"


access_options = options(
    click.option(
        "--host",
        default=LOOPBACK,
        show_default=True,
        help="Interface to listen on: loopback is reachable from this machine only; 0.0.0.0 (every interface, as "
        "a container needs) is refused while the server grades with a key of its own, unless it has a token or "
        "--no-auth.",
    ),
    click.option(
        "--auth-token-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Tokens, one a line: every request but /health must carry one, as X-API-Key (the OpenReward SDK "
        "client's api_key or OPENREWARD_API_KEY), Authorization: Bearer, or Basic auth's password (a URL's "
        "http://user:TOKEN@host, as OpenRLHF sends it); each is a credential of its own, and a "
        f"session is used only with the one that created it [default: ${TOKEN_VARIABLE}, one token].",
    ),
    click.option(
        "--no-auth",
        is_flag=True,
        envvar=NO_AUTH_VARIABLE,
        help="Serve beyond loopback without a token: for a server behind a network that lets only your clients in "
        f"(the OpenReward platform's authenticates every request) [env: {NO_AUTH_VARIABLE}=1].",
    ),
    # The bounds on a request: one flag per field of `ServeLimits`, its range, default and help the field's.
    *(
        click.option(
            limit_flag(name),
            type=bounded(field),
            default=field.default,
            show_default=True,
            help=field.description,
        )
        for name, field in ServeLimits.model_fields.items()
    ),
)


def access_from_flags(flags: dict[str, Any]) -> tuple[Access, ServeLimits]:
    """Who the server lets in and its bounds, from `access_options`' flags (taken out of `flags`); the tokens
    from --auth-token-file, else $HEALTHBENCH_SERVER_TOKEN."""
    tokens = ServerTokens.load(flags.pop("auth_token_file"), os.environ)
    access = Access(host=flags.pop("host"), tokens=tokens, no_auth=flags.pop("no_auth"))
    limits = ServeLimits(**{name: flags.pop(f"max_{name}") for name in ServeLimits.model_fields})
    return access, limits
