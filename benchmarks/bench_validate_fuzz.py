"""`edge-export bench` and `edge-export validate --test-vectors` on mutated flatbuffers: a small CNN
exported in fp32 with its test vectors, then random (flip, truncate, zero, overwrite) and
structure-aware mutants of it (tests/flatbuffer/flatbuffer_mutations.py), each through the real CLI
in a worker process (tests/flatbuffer/flatbuffer_fuzz_worker.py --vectors; a new worker after a
crash). The long run of tests/flatbuffer/test_flatbuffer_fuzz_bench_vectors.py.

    .venv/bin/python benchmarks/bench_validate_fuzz.py [--mutants 600] [--seed 13]

Prints one row per mutation kind (each command's exit codes) and the totals; exits 1 if a worker
died, or a command ended in a traceback, an exit 4, a native crash the isolation caught, or left
output behind.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "flatbuffer")]

GOOD = ("0", "1", "2", "3")


def export_with_vectors(folder: Path) -> tuple[Path, Path]:
    import torch

    import edge_export
    from tools_models import make_cnn

    result = edge_export.export(
        make_cnn(), example_inputs=(torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)),),
        output=folder / "cnn.tflite", emit_test_vectors=True, samples=2, host_latency=False,
    )
    assert result.exit_code == 0
    return folder / "cnn.tflite", folder / "cnn.testdata.npz"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mutants", type=int, default=600)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    from flatbuffer_mutations import mutate as mutate_structure
    from test_flatbuffer_fuzz import mutate as mutate_bytes
    from test_flatbuffer_fuzz import run_workers

    with tempfile.TemporaryDirectory(prefix="bench-validate-fuzz-") as tmp:
        root = Path(tmp)
        model, vectors = export_with_vectors(root)
        original, rng = model.read_bytes(), random.Random(args.seed)
        paths, kinds = [], {}
        for i in range(args.mutants):
            kind, data = mutate_bytes(original, rng) if i % 3 == 0 else mutate_structure(original, rng)
            path = root / f"m{i:05d}_{kind}.tflite"
            path.write_bytes(data)
            paths.append(path)
            kinds[f"m{i:05d}"] = kind
        (root / "scratch").mkdir()
        start = time.perf_counter()
        outcomes, failures = run_workers(paths, ("--vectors", str(vectors), str(root / "scratch")))
        seconds = time.perf_counter() - start
    flags = collections.Counter(f for outcome in outcomes.elements() for f in outcome.split())
    print("| command | " + " | ".join(f"exit {c}" for c in GOOD) + " | other |")
    print("|---" * (len(GOOD) + 2) + "|")
    bad = 0
    for command in ("bench", "vectors"):
        other = sum(n for f, n in flags.items() if f.startswith(command + "=") and f.split("=")[1] not in GOOD)
        bad += other
        label = "bench" if command == "bench" else "validate --test-vectors"
        print(f"| {label} | " + " | ".join(str(flags[f"{command}={c}"]) for c in GOOD) + f" | {other} |")
    others = sorted(f for f in flags if f.split("=")[1] not in GOOD)
    print(f"\n{args.mutants} mutants (seed {args.seed}) in {seconds:.0f} s; workers died: {len(failures)}; "
          f"other outcomes: {bad} {others}")
    for line in failures:
        print("  " + line)
    sys.exit(1 if failures or bad else 0)


if __name__ == "__main__":
    main()
