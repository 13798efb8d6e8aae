"""Structure-aware fuzzing of the flatbuffer verifier: thousands of mutants of a small fp32 and int8
CNN, each verified in pure Python and, when accepted, run with LiteRT (XNNPACK and builtin kernels)
in a child process. A mutant the verifier accepts and the runtime then crashes on is a verifier gap.

    .venv/bin/python benchmarks/flatbuffer_fuzz.py [--mutants 4000] [--seed 13]

Mutations (tests/flatbuffer/flatbuffer_mutations.py): omitted / out-of-range / missing / extra operator
inputs and outputs, buffer indices, short / long / swapped buffers, shapes, element types, opcode
indices, builtin codes, subgraph inputs and outputs, quantization parameters, builtin options, and on
the raw bytes vtable entries, table-to-vtable offsets and random bytes. Prints one row per mutation
kind and the totals; exits 1 if anything crashed.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "flatbuffer"))

_RUN_LIMIT_BYTES = 64 << 20


def run_both_resolvers(data: bytes, model) -> str:
    """Runs in the child: 'ran' or 'runtime-error' (a refusal the runtime reported cleanly)."""
    import numpy as np

    from edge_export.errors import RuntimeRunError
    from edge_export.runtime.interpreter import Resolver, TFLiteRunner

    rng = np.random.default_rng(0)
    outcome = "ran"
    for resolver in (Resolver.XNNPACK, Resolver.BUILTIN):
        try:
            runner = TFLiteRunner(model, resolver=resolver)
            arrays = [
                rng.standard_normal(s.shape).astype(np.float32) if np.dtype(s.dtype).kind == "f" or s.quantized
                else rng.integers(0, 4, size=s.shape).astype(s.dtype)
                for s in runner.inputs
            ]
            runner.run(arrays)
        except RuntimeRunError:
            outcome = "runtime-error"
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mutants", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()

    import numpy as np

    from edge_export.errors import FlatbufferError
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.processes.isolation import NativeCrashError, run_isolated
    from edge_export.processes.library_output import quiet_libraries
    from flatbuffer_mutations import KINDS, mutate
    from tools_models import build_cnn_models

    models = build_cnn_models()
    sources = {"fp32": models.fp32, "int8": models.int8}
    rng = random.Random(args.seed)
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    crashes: list[str] = []
    start = time.perf_counter()
    with quiet_libraries():
        for i in range(args.mutants):
            source = rng.choice(list(sources))
            kind, data = mutate(sources[source], rng)
            row = table[kind]
            row["mutants"] += 1
            try:
                model = read_flatbuffer(data)
            except FlatbufferError:
                row["rejected"] += 1
                continue
            declared = sum(int(np.prod([max(d, 1) for d in t.shape])) * 4 for t in model.tensors)
            if declared > _RUN_LIMIT_BYTES:
                row["too large to run"] += 1
                continue
            try:
                row[run_isolated(run_both_resolvers, data, model, stage=f"mutant {i}", backend="LiteRT")] += 1
            except NativeCrashError as exc:
                row["crashed"] += 1
                crashes.append(f"mutant {i} ({source}, {kind}): {exc.signal_name or exc.message}")
                Path(f"/tmp/flatbuffer_fuzz_crash_{i}.tflite").write_bytes(data)
    seconds = time.perf_counter() - start
    columns = ("mutants", "rejected", "ran", "runtime-error", "too large to run", "crashed")
    print("| kind | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    total: collections.Counter = collections.Counter()
    for kind in KINDS:
        total.update(table[kind])
        print(f"| {kind} | " + " | ".join(str(table[kind][c]) for c in columns) + " |")
    print("| **total** | " + " | ".join(f"**{total[c]}**" for c in columns) + " |")
    print(f"\n{args.mutants} mutants (seed {args.seed}) in {seconds:.0f} s; crashes: {len(crashes)}")
    for line in crashes:
        print("  " + line)
    sys.exit(1 if crashes else 0)


if __name__ == "__main__":
    main()
