"""Mutated and truncated flatbuffers must never crash the process: verified first, then either
rejected (FlatbufferError), refused by the runtime (RuntimeRunError), or run."""

from __future__ import annotations

import collections
import os
import random
import subprocess
import sys
from pathlib import Path

from tools_models import cnn_models  # noqa: F401  (a pytest fixture)

WORKER = Path(__file__).with_name("flatbuffer_fuzz_worker.py")
MUTANTS_PER_MODEL = 200


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    b = bytearray(data)
    kind = rng.choice(["flip", "truncate", "zero", "overwrite"])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        b = b[: rng.randrange(0, len(b))]
    elif kind == "zero":
        start = rng.randrange(len(b))
        end = min(len(b), start + rng.randint(1, 64))
        b[start:end] = bytes(end - start)
    else:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    return kind, bytes(b)


def run_workers(paths: list[Path]) -> tuple[collections.Counter, list[str]]:
    """Feed the files to worker processes; restart after a crash and remember the culprit."""
    outcomes: collections.Counter = collections.Counter()
    failures: list[str] = []
    todo = list(paths)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    while todo:
        proc = subprocess.run(
            [sys.executable, str(WORKER)],
            input="\n".join(map(str, todo)) + "\n",
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        last_started = -1
        for line in proc.stdout.splitlines():
            parts = line.split()
            if parts[0] == "START":
                last_started = int(parts[1])
            elif parts[0] == "DONE":
                outcomes[parts[2]] += 1
        if proc.returncode == 0:
            break
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        culprit = todo[last_started] if last_started >= 0 else "(before the first file)"
        failures.append(f"{culprit}: {how}: {proc.stderr.strip().splitlines()[-1:] }")
        todo = todo[last_started + 1 :] if last_started >= 0 else []
    return outcomes, failures


def test_mutated_flatbuffers_never_crash(cnn_models, tmp_path):
    rng = random.Random(20261130)
    paths, kinds = [], {}
    for name in ("fp32", "int8"):
        original = getattr(cnn_models, name)
        for i in range(MUTANTS_PER_MODEL):
            kind, data = mutate(original, rng)
            path = tmp_path / f"{name}_{i:03d}_{kind}.tflite"
            path.write_bytes(data)
            paths.append(path)
            kinds[path] = kind

    outcomes, failures = run_workers(paths)

    assert not failures, "crashed or raised an unexpected error:\n" + "\n".join(failures)
    assert sum(outcomes.values()) == len(paths)
    # The mix is what makes the test meaningful: many files rejected, many still runnable.
    assert outcomes["rejected"] > len(paths) // 4, outcomes
    assert outcomes["ran"] + outcomes["runtime-error"] > len(paths) // 10, outcomes
