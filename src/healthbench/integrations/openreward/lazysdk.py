"""Importing the OpenReward SDK's server side without its client side.

`openreward/__init__.py` imports the client side of the SDK (the anthropic, openai and google SDKs): seconds of
start-up and about 80 MB that a server never uses. `defer_package_init("openreward")`, called before the first
`import openreward.environments`, lets its submodules import without running the package's `__init__` first.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from typing import Any


def defer_package_init(name: str) -> None:
    """Register package `name` so that its submodules import without running its `__init__` first.

    `openreward/__init__.py` imports the client side of the SDK (the anthropic, openai and google SDKs):
    seconds of start-up and about 80 MB that a server never uses. The package's `__init__` still runs,
    in place, the first time anything reads a top-level name (`from openreward import AsyncOpenReward`),
    so code elsewhere in the process sees the ordinary package.
    """
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not an importable package: let the imports below fail as usual
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    lock = threading.Lock()

    def complete(attribute: str) -> Any:
        with lock:
            if "__getattr__" in module.__dict__:
                del module.__dict__["__getattr__"]
                loader.exec_module(module)
        return getattr(module, attribute)

    module.__dict__["__getattr__"] = complete
    sys.modules[name] = module
