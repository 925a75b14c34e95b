"""The one Jinja environment every page is rendered by (the report, a meta-eval's report, a probe's page, the
leaderboard): autoescaped, block tags trimmed, and an undefined name an error rather than an empty string, so a
template that names a figure the code no longer gives fails loudly instead of showing a blank."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jinja2 import Environment, Template


@cache
def environment() -> Environment:
    """The environment, built once."""
    # Deferred: jinja2 costs 0.1 s of import, which every command that writes no page would pay.
    from jinja2 import Environment, StrictUndefined

    return Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)


@cache
def template(package: str, name: str) -> Template:
    """The template `name`, package data of `package` (`healthbench.reporting`, say), compiled once."""
    return environment().from_string(resources.files(package).joinpath(name).read_text(encoding="utf-8"))
