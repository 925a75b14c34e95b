"""How a run reports its progress without printing: the command line gives it a `Progress`, a library caller
gives it nothing (or its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Progress(Protocol):
    """Told of a run's progress as it goes: how much there is, each sample done, and events worth a line."""

    def start(self, total: int, unit: str) -> None:
        """The run has `total` samples (or rows) to do."""

    def advance(self, status: Callable[[], str]) -> None:
        """One more is done (graded, or failed); `status` describes the pace and the cost so far, if wanted."""

    def note(self, message: str) -> None:
        """Something happened worth a line of its own (a batch submitted, say)."""

    def close(self) -> None:
        """The run is over."""


class Quiet:
    """A `Progress` that reports nothing: the default for library callers."""

    def start(self, total: int, unit: str) -> None:
        """Nothing to show."""

    def advance(self, status: Callable[[], str]) -> None:
        """Nothing to show."""

    def note(self, message: str) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""
