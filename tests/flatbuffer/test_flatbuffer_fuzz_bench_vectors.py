"""`edge-export bench` and `edge-export validate --test-vectors` (the real CLI, in a worker process)
on mutants of an exported model: a clean documented exit (0, 1, 2 or 3), never a traceback, an exit
4 or a signal, no native crash left for the isolation to catch (the verifier refuses such files
first), and no output from a failed command, nor a temporary file from any."""

from __future__ import annotations

import collections
import random

import pytest

from flatbuffer_mutations import mutate as mutate_structure
from test_flatbuffer_fuzz import mutate as mutate_bytes
from test_flatbuffer_fuzz import run_workers

pytestmark = pytest.mark.hostile  # untrusted input: in the default tier even where slow

MUTANTS = 36


@pytest.fixture(scope="module")
def exported_with_vectors(tmp_path_factory):
    """The tools CNN exported in fp32 with its test vectors (what `validate --test-vectors` reads)."""
    import torch

    import edge_export
    from tools_models import make_cnn

    folder = tmp_path_factory.mktemp("vectors")
    result = edge_export.export(
        make_cnn(), example_inputs=(torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)),),
        output=folder / "cnn.tflite", emit_test_vectors=True, samples=2, host_latency=False,
    )
    assert result.exit_code == 0
    return folder / "cnn.tflite", folder / "cnn.testdata.npz"


@pytest.mark.slow  # the export with test vectors is most of it (about 15 s here)
def test_bench_and_validate_with_test_vectors_survive_mutants(exported_with_vectors, tmp_path):
    model, vectors = exported_with_vectors
    original = model.read_bytes()
    rng = random.Random(36_2026)
    paths = []
    for i in range(MUTANTS):
        kind, data = mutate_bytes(original, rng) if i % 3 == 0 else mutate_structure(original, rng)
        path = tmp_path / f"m{i:03d}_{kind}.tflite"
        path.write_bytes(data)
        paths.append(path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    outcomes, failures = run_workers(paths, ("--vectors", str(vectors), str(scratch)))

    assert not failures, "a worker died:\n" + "\n".join(failures)
    assert sum(outcomes.values()) == len(paths)
    flags = collections.Counter(f for outcome in outcomes.elements() for f in outcome.split())
    bad = {f: n for f, n in flags.items() if f.split("=")[1] not in ("0", "1", "2", "3")}
    assert not bad, flags
    # Meaningful only with both kinds of file: some refused (exit 2), some run to the end (0 or 1).
    assert flags["bench=2"] + flags["vectors=2"] > len(paths) // 3, flags
    assert flags["bench=0"] > len(paths) // 20 and flags["vectors=0"] + flags["vectors=1"] > len(paths) // 20, flags
