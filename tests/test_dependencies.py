"""Every package src/ imports is declared in pyproject.toml, and an optional feature whose extra is missing says
which extra to install, in one line."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

from healthbench.api.pacing.store import PaceStore
from healthbench.data.hub import resolve_commit
from healthbench.errors import MissingExtra

ROOT = Path(__file__).resolve().parent.parent


def imported() -> dict[str, set[str]]:
    """The top-level names src/ imports from outside the standard library, with the files that import them."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "healthbench":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def declared() -> set[str]:
    """The distributions pyproject.toml names, in the core and every extra, as import names (`inspect-ai` is
    imported as `inspect_ai`)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    names = {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0] for requirement in requirements}
    return {name.lower().replace("-", "_") for name in names}


def test_every_import_of_src_is_declared() -> None:
    missing = {name: files for name, files in imported().items() if name.lower() not in declared()}
    assert not missing, missing


def without(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `module` look not installed to `MissingExtra.check`."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else find_spec(name))


def test_a_pace_store_without_redis_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    without("redis", monkeypatch)
    with pytest.raises(MissingExtra) as caught:
        PaceStore("redis://127.0.0.1:1/0")
    assert str(caught.value) == (
        "a shared pace (`pace_store`) needs the package's redis extra, and redis is not installed: pip install -e "
        "'.[redis]' in the clone"
    )
    assert isinstance(caught.value, ImportError)


def test_professional_without_huggingface_hub_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    without("huggingface_hub", monkeypatch)
    with pytest.raises(MissingExtra, match=r"needs the package's hub extra, and huggingface_hub is not installed"):
        resolve_commit("openai/healthbench-professional", "data.jsonl", "main")
