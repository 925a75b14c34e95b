"""A pace store's URL: checked when settings are made, and shown without its password (no Redis import here: a
run that shares no pace never loads the client)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from healthbench.errors import SettingsError

PACE_STORE_VARIABLE = "HEALTHBENCH_PACE_STORE"
_SCHEMES = ("redis", "rediss", "unix")


def redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else ":***@"
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=user + host + (f":{parts.port}" if parts.port else "")))


def validated(url: str) -> str:
    """`url` if it names a Redis database (`redis://HOST:PORT/DB`, `rediss://`, `unix://`), else `SettingsError`."""
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise SettingsError(f"pace store {redacted(url)}: not a Redis URL (redis://HOST:PORT/DB, rediss://, unix://)")
    # redis-py reads a path that is no number as database 0: a typo would share a pace in the wrong place.
    if parts.scheme != "unix" and parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise SettingsError(f"pace store {redacted(url)}: the database must be a number (redis://HOST:PORT/0)")
    return url
