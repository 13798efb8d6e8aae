"""A short run of the TorchScript reader's fuzzer (the long one: benchmarks/torchscript_fuzz.py):
mutated real archives end in a checked archive or a documented refusal, never another exception or a
hang, and an archive whose code names a file operator is never accepted; a few accepted mutants are
then loaded, which ends in a model or a documented error."""

from __future__ import annotations

import random
import time

import pytest
import torch

from torchscript_mutations import build_sources, members, mutate, reaches_outside
from edge_export.errors import EdgeExportError
from edge_export.loading.torchscript_archive import CheckedTorchScript, read_checked_torchscript

CASES = 100


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return [members(p) for p in build_sources(tmp_path_factory.mktemp("ts-sources"))]


def test_mutated_archives_end_checked_or_refused(sources, tmp_path):
    rng = random.Random(20261203)
    outcomes, slowest = {"accepted": 0, "refused": 0}, 0.0
    for case in range(CASES):
        what, data = mutate(rng, rng.choice(sources))
        path = tmp_path / f"case{case}.pt"
        path.write_bytes(data)
        start = time.monotonic()
        try:
            result = read_checked_torchscript(path)
        except EdgeExportError as exc:
            assert exc.exit_code == 2 and str(exc), (what, exc)
            outcomes["refused"] += 1
        else:
            assert isinstance(result, CheckedTorchScript), what
            assert not reaches_outside(data), f"{what}: an archive naming a file operator was accepted"
            outcomes["accepted"] += 1
        slowest = max(slowest, time.monotonic() - start)
    assert outcomes["accepted"] > 5 and outcomes["refused"] > 30, outcomes  # both paths exercised
    assert slowest < 30.0  # a hang, not a speed: one mutant took 6 s with three test workers on two cores


def test_accepted_mutants_load_to_a_model_or_a_documented_error(sources, tmp_path):
    from edge_export.loading.sources import load_model

    rng = random.Random(7)
    tried = 0
    traced = sources[2]  # the traced CNN: one input, 1x3x8x8
    for case in range(60):
        what, data = mutate(rng, traced)
        path = tmp_path / f"m{case}.pt"
        path.write_bytes(data)
        try:
            read_checked_torchscript(path)
        except EdgeExportError:
            continue
        tried += 1
        try:
            load_model(path, example_inputs=(torch.randn(1, 3, 8, 8),))
        except EdgeExportError as exc:
            assert exc.exit_code in (2, 3), (what, exc)
        if tried == 4:
            break
    assert tried == 4
