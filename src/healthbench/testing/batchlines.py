"""Reading a batch input file: each line checked as OpenAI checks it, each body kept as written."""

from __future__ import annotations

import json
from typing import Any

from healthbench.testing.replies import Body

__all__ = ["line_error", "validate_lines"]

_JSON_WS = " \t\n\r"
_DECODER = json.JSONDecoder()


def _skip_ws(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in _JSON_WS:
        pos += 1
    return pos


def _parse_line(line: str) -> dict[str, tuple[Any, str]]:
    """Parse a JSON object, keeping each top-level value with its source text.

    ``batch_bodies`` records a body exactly as the client wrote it, since re-serialising would hide
    differences (key order, spacing) that matter for prompt caching.
    """
    fields: dict[str, tuple[Any, str]] = {}
    pos = _skip_ws(line, 0)
    if not line.startswith("{", pos):
        raise json.JSONDecodeError("not a JSON object", line, pos)
    pos = _skip_ws(line, pos + 1)
    closed = line.startswith("}", pos)
    while not closed:
        key, pos = _DECODER.raw_decode(line, pos)
        pos = _skip_ws(line, pos)
        if not isinstance(key, str) or not line.startswith(":", pos):
            raise json.JSONDecodeError("expected a string key and ':'", line, pos)
        start = _skip_ws(line, pos + 1)
        value, pos = _DECODER.raw_decode(line, start)
        fields[key] = (value, line[start:pos])
        pos = _skip_ws(line, pos)
        closed = line.startswith("}", pos)
        if not closed and not line.startswith(",", pos):
            raise json.JSONDecodeError("expected ',' or '}'", line, pos)
        pos = _skip_ws(line, pos + 1)
    if pos < len(line):
        raise json.JSONDecodeError("trailing data after the object", line, pos)
    return fields


def validate_lines(
    lines: list[tuple[int, bytes]], errors: list[Body], url: str, bodies: list[str] | None
) -> list[tuple[str, Body]]:
    """Check every (line number, line) of a batch input file for a batch to ``url``.

    Appends an error per bad line to ``errors``, and each line's body as written to ``bodies``
    (unless None); returns the (custom_id, body) pairs of the good lines.
    """
    requests: list[tuple[str, Body]] = []
    seen: set[str] = set()
    for n, raw in lines:
        try:
            fields = _parse_line(raw.decode())
        except ValueError:  # UnicodeDecodeError and JSONDecodeError included
            errors.append(line_error("invalid_json_line", "the line is not a JSON object", n))
            continue
        custom_id = fields.get("custom_id", (None, ""))[0]
        body, body_text = fields.get("body", (None, ""))
        if "body" in fields and bodies is not None:
            bodies.append(body_text)
        if not isinstance(custom_id, str):
            errors.append(line_error("invalid_custom_id", "'custom_id' must be a string", n))
        elif custom_id in seen:
            errors.append(line_error("duplicate_custom_id", f"custom_id {custom_id!r} is repeated", n))
        elif fields.get("method", (None, ""))[0] != "POST":
            errors.append(line_error("invalid_method", "'method' must be 'POST'", n))
        elif fields.get("url", (None, ""))[0] != url:
            errors.append(line_error("invalid_url", f"'url' must be the batch's endpoint, '{url}'", n))
        elif not isinstance(body, dict):
            errors.append(line_error("invalid_body", "'body' must be an object", n))
        else:
            requests.append((custom_id, body))
        if isinstance(custom_id, str):
            seen.add(custom_id)
    return requests


def line_error(code: str, message: str, line: int | None) -> Body:
    """A batch validation error, naming the line of the input file it is about (None: the whole file)."""
    return {"code": code, "message": message, "param": None, "line": line}
