"""run_confined's time and memory limits (edge_export/processes/sandbox.py): a child past either is killed and
LimitExceeded raised; within them, results, stage messages and errors come back as before."""

from __future__ import annotations

import os
import time

import pytest

from edge_export.errors import UsageError
from edge_export.processes.sandbox import LimitExceeded, run_confined

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="run_confined forks")


def _spin(channel) -> None:
    channel.stage("spinning")
    while True:
        pass


def _allocate(channel) -> bytes:
    return b"x" * (4 << 30)  # 4 GiB in one allocation


def _grow(channel) -> list:
    chunks = []
    while True:
        chunks.append(bytearray(16 << 20))


def _result(value, channel):
    channel.stage("working")
    return {"value": value, "pid": os.getpid()}


def _refuse(channel):
    raise UsageError("a bad input", "fix it")


def test_a_child_past_its_time_limit_is_killed():
    stages: list[str] = []
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as info:
        run_confined(_spin, on_stage=stages.append, time_limit=0.5)
    assert info.value.kind == "time" and info.value.limit == 0.5
    assert time.monotonic() - started < 5 and stages == ["spinning"]  # messages before the deadline arrive


@pytest.mark.parametrize("fn", [_allocate, _grow])
def test_a_child_past_its_memory_limit_is_stopped(fn):
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as info:
        run_confined(fn, memory_limit=256 << 20, time_limit=30)
    assert info.value.kind == "memory" and info.value.limit == 256 << 20 and info.value.detail == "MemoryError"
    assert time.monotonic() - started < 10


def test_within_the_limits_results_and_errors_come_back_as_before():
    stages: list[str] = []
    result, status = run_confined(_result, 42, on_stage=stages.append, time_limit=30, memory_limit=512 << 20)
    assert result["value"] == 42 and result["pid"] != os.getpid() and stages == ["working"]
    assert status.describe()
    with pytest.raises(UsageError, match="a bad input"):
        run_confined(_refuse, time_limit=30, memory_limit=512 << 20)


def test_without_limits_a_large_result_still_arrives_whole():
    """The pipe is read in chunks now (for the deadline); a result of several MiB arrives intact."""
    payload = bytes(range(256)) * (12 << 12)  # 12 MiB
    result, _ = run_confined(lambda channel: payload)
    assert result == payload
