"""A model named with its endpoint, `MODEL[@BASE_URL]`, as `judges --grader` and the `--attacker` of `probe` and
`judges` take it, and an endpoint as a file or a page may name it."""

from __future__ import annotations

import dataclasses
import re

import click

from healthbench.api.endpoint import base_urls, is_http_url
from healthbench.api.failures import shown

_URL_AT = re.compile(r"@(?=https?://)", re.IGNORECASE)
_SCHEME = re.compile(r"^https?://", re.IGNORECASE)
# What may follow the @ of a model's own name rather than an endpoint: a version's digits (Vertex's
# claude-sonnet-4@20250514).
_VERSION = re.compile(r"^[0-9]+$")


@dataclasses.dataclass(frozen=True)
class GraderChoice:
    """One `MODEL[@BASE_URL]` as given: its text, its model, and its endpoint when it names one."""

    given: str
    model: str
    base_url: str | None


def parse_model(text: str, flag: str) -> GraderChoice:
    """`MODEL` or `MODEL@BASE_URL` (the URL with http:// or https://, in any case; several, comma-separated, for a
    pool of servers of the model), given to `flag`;
    `click.BadParameter` naming what is wrong. A model's name may hold an @ followed by a version's digits
    (claude-sonnet-4@20250514); any other @ must be followed by a URL."""
    parts = _URL_AT.split(text.strip(), maxsplit=1)
    model = parts[0].strip()
    if not model:
        raise click.BadParameter(f"{text!r}: no model before the endpoint (MODEL or MODEL@BASE_URL)", param_hint=flag)
    if len(parts) == 1:
        if "@" in model and not _VERSION.match(model.rpartition("@")[2]):
            raise click.BadParameter(
                f"{text!r}: the endpoint after @ must be a URL starting with http:// or https:// "
                "(MODEL@http://HOST:PORT/v1); a model's own @ is followed by its version's digits only",
                param_hint=flag,
            )
        return GraderChoice(text, model, None)
    # Several servers of one model (a pool), comma-separated, each a URL.
    urls = base_urls(parts[1])
    for url in urls:
        if not is_http_url(url):
            raise click.BadParameter(f"{text!r}: {url!r} names no host (MODEL@http://HOST:PORT/v1)", param_hint=flag)
    # A scheme's case means nothing (RFC 3986): HTTP://host and http://host are one endpoint.
    return GraderChoice(text, model, ",".join(_SCHEME.sub(lambda m: m.group(0).lower(), url) for url in urls))


def shown_url(url: str) -> str:
    """An endpoint (or a pool's, comma-separated) as judges.json and the page name it: without a user or password
    it may carry."""
    return ",".join(map(shown, base_urls(url)))
