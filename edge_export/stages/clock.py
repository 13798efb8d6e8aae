"""The stages' clock and announcer: each stage's label goes to the caller as it starts (the CLI's
spinner), its duration to the report's ``stages``."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

from ..reports.model import StageTiming

__all__ = ["StageClock"]


class StageClock:
    def __init__(self, on_stage: Callable[[str], None] | None, on_progress: Callable[[str, int, int], None] | None = None) -> None:
        self.times: list[StageTiming] = []
        self._on_stage = on_stage
        self.on_progress = on_progress  # (label, step, total) of a long stage's steps

    def announce(self, label: str) -> None:
        if self._on_stage:
            self._on_stage(label)

    def redirect(self, on_stage: Callable[[str], None]) -> None:
        """Stage labels go to ``on_stage`` from now on (a confined child sends them to its parent)."""
        self._on_stage = on_stage

    @contextmanager
    def run(self, name: str, label: str) -> Iterator[None]:
        from ..processes.isolation import pause_for_test

        if self._on_stage:
            self._on_stage(label)
        pause_for_test(name)  # a test hook (isolation.PAUSE_HOOK_ENV): interrupting a run in this stage
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times.append(StageTiming(name, round(time.perf_counter() - start, 4)))
