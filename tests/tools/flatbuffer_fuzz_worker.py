"""Child process of the flatbuffer fuzz test: verify, then run, each file named on stdin.

It runs in its own process so that a crash of the native interpreter (death by a signal) is seen by
the parent test instead of killing the test session. For each file it prints ``START i`` before
touching it and ``DONE i <outcome>`` after (flushed), so the parent knows which file was the culprit.
"""

from __future__ import annotations

import sys

import numpy as np

from edge_export.errors import FlatbufferError, RuntimeRunError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.runtime import Resolver, TFLiteRunner

# A mutated dimension can ask for hundreds of MB; such files are verified but not run (running
# them is only slow, and the 2 GB per-tensor limit is checked by the verifier itself).
_RUN_LIMIT_BYTES = 64 << 20


def random_inputs(runner: TFLiteRunner, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for spec in runner.inputs:
        if np.dtype(spec.dtype).kind == "f" or spec.quantized:
            arrays.append(rng.standard_normal(spec.shape).astype(np.float32))
        else:
            arrays.append(rng.integers(0, 4, size=spec.shape).astype(spec.dtype))
    return arrays


def check_one(path: str, rng: np.random.Generator) -> str:
    with open(path, "rb") as f:
        data = f.read()
    try:
        model = read_flatbuffer(data)
    except FlatbufferError:
        return "rejected"
    declared = sum(int(np.prod([max(d, 1) for d in t.shape])) * 4 for t in model.tensors)
    if declared > _RUN_LIMIT_BYTES:
        return "too-large-to-run"
    outcome = "ran"
    for resolver in (Resolver.XNNPACK, Resolver.BUILTIN):
        try:
            runner = TFLiteRunner(data, model=model, resolver=resolver)
            runner.run(random_inputs(runner, rng))
        except RuntimeRunError:
            outcome = "runtime-error"
    return outcome


def main() -> None:
    rng = np.random.default_rng(0)
    for i, line in enumerate(sys.stdin):
        print(f"START {i}", flush=True)
        print(f"DONE {i} {check_one(line.strip(), rng)}", flush=True)


if __name__ == "__main__":
    main()
