"""Every page is rendered by one Jinja environment, which refuses a name its template uses and the code does not
give (a blank where a figure should be is a silent wrong page)."""

from __future__ import annotations

from pathlib import Path

import pytest
from jinja2 import UndefinedError

from healthbench.reporting.pages import environment, template

SRC = Path(__file__).parents[1] / "src" / "healthbench"


def test_one_environment_builds_every_page() -> None:
    building = sorted(
        str(path.relative_to(SRC)) for path in SRC.rglob("*.py") if "Environment(" in path.read_text(encoding="utf-8")
    )
    assert building == ["reporting/pages.py"]
    assert template("healthbench.reporting", "probe.html.j2").environment is environment()


def test_an_undefined_name_is_an_error_and_text_is_escaped() -> None:
    page = environment().from_string("{{ figure }} {{ missing }}")
    with pytest.raises(UndefinedError, match="missing"):
        page.render(figure=1)
    assert environment().from_string("{{ text }}").render(text="<b>") == "&lt;b&gt;"
