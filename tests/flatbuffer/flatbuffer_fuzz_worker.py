"""Child process of the flatbuffer fuzz tests: each file named on stdin is checked, one per line.

It runs in its own process so that a crash of the native interpreter (death by a signal) is seen by
the parent test instead of killing the test session. For each file it prints ``START i`` before
touching it and ``DONE i <outcome>`` after (flushed), so the parent knows which file was the culprit.

Two modes:
- default: verify with read_flatbuffer, then run the file with LiteRT (XNNPACK and builtin kernels)
  in this process; outcome ``rejected``, ``too-large-to-run``, ``runtime-error`` or ``ran``.
- ``--cli REFERENCE``: run the real CLI in this process, ``inspect FILE`` then
  ``validate FILE --reference REFERENCE``; outcome ``inspect=<flag> validate=<flag>`` where a flag is
  the exit code, or ``traceback``, ``internal-error`` or ``native-crash`` (a crash that the child-process
  isolation caught) when the output shows one.
- ``--vectors TESTDATA SCRATCH``: the real CLI's ``bench FILE`` and ``validate FILE --test-vectors TESTDATA``,
  each in an empty folder of its own under SCRATCH; outcome ``bench=<flag> vectors=<flag>``, where a flag is also
  ``partial-output`` when a failed command (exit 2 or 3) left a file, or any command a temporary file.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

from edge_export.errors import FlatbufferError, RuntimeRunError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.runtime.interpreter import Resolver, TFLiteRunner

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
            runner = TFLiteRunner(model, resolver=resolver)
            runner.run(random_inputs(runner, rng))
        except RuntimeRunError:
            outcome = "runtime-error"
    return outcome


def run_cli(args: list[str]) -> str:
    """The CLI's exit code for ``args``, or what went wrong, read from its stderr."""
    from edge_export.cli import main

    with tempfile.TemporaryFile() as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read().decode("utf-8", errors="replace")
    if "Traceback" in text:
        return "traceback"
    if code == 4 or "internal error" in text:
        return "internal-error"
    if "native code was killed" in text:
        return "native-crash"
    return str(code)


def check_one_cli(path: str, reference: str, shape: str) -> str:
    inspect = run_cli(["inspect", path])
    validate = run_cli(["validate", path, "--reference", reference, "--input-shape", shape, "--samples", "2", "--quiet"])
    return f"inspect={inspect} validate={validate}"


def run_cli_in_empty_folder(args: list[str], folder: str) -> str:
    """``run_cli`` with ``folder`` (empty) as the working directory; ``partial-output`` when a failed
    command left anything there, or any command a temporary file."""
    os.makedirs(folder)
    saved = os.getcwd()
    os.chdir(folder)
    try:
        flag = run_cli(args)
    finally:
        os.chdir(saved)
    left = os.listdir(folder)
    if any(name.endswith(".tmp") or name.endswith(".lock") for name in left) or (flag in ("2", "3") and left):
        return "partial-output"
    return flag


def check_one_vectors(path: str, vectors: str, scratch: str, i: int) -> str:
    path = os.path.abspath(path)
    bench = run_cli_in_empty_folder(["bench", path, "--runs", "2", "--warmup", "0"], os.path.join(scratch, f"b{i}"))
    report = os.path.join(scratch, f"v{i}", "m.validate")
    checked = run_cli_in_empty_folder(
        ["validate", path, "--test-vectors", vectors, "--report", report, "--quiet"], os.path.dirname(report)
    )
    return f"bench={bench} vectors={checked}"


def main() -> None:
    cli = sys.argv[1] if sys.argv[1:2] in (["--cli"], ["--vectors"]) else None
    if cli == "--vectors":
        vectors, scratch = os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
        check = lambda line, i: check_one_vectors(line, vectors, scratch, i)  # noqa: E731
    elif cli:
        reference, shape = sys.argv[2], sys.argv[3]
        check = lambda line, i: check_one_cli(line, reference, shape)  # noqa: E731
    if cli:
        # The protocol goes to the original stdout; the CLI's own tables go nowhere.
        protocol = os.fdopen(os.dup(1), "w", buffering=1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
    else:
        protocol = sys.stdout
    rng = np.random.default_rng(0)
    for i, line in enumerate(sys.stdin):
        print(f"START {i}", file=protocol, flush=True)
        outcome = check(line.strip(), i) if cli else check_one(line.strip(), rng)
        print(f"DONE {i} {outcome}", file=protocol, flush=True)


if __name__ == "__main__":
    main()
