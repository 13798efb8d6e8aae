"""Mutated and truncated flatbuffers must never crash the process: verified first, then either
rejected (FlatbufferError), refused by the runtime (RuntimeRunError), or run."""

from __future__ import annotations

import collections
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tools_models import cnn_models  # noqa: F401  (a pytest fixture)

pytestmark = pytest.mark.hostile  # untrusted input: in the default tier even where slow

WORKER = Path(__file__).with_name("flatbuffer_fuzz_worker.py")
MUTANTS_PER_MODEL = 200
BYTE_KINDS = ("flip", "truncate", "zero", "overwrite")


def mutate(data: bytes, rng: random.Random, kind: str | None = None) -> tuple[str, bytes]:
    """A random byte-level mutant of ``data``: (kind, bytes), of ``kind`` or one drawn from BYTE_KINDS."""
    b = bytearray(data)
    kind = kind or rng.choice(BYTE_KINDS)
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


def run_workers(paths: list[Path], worker_args: tuple[str, ...] = ()) -> tuple[collections.Counter, list[str]]:
    """Feed the files to worker processes; restart after a crash and remember the culprit."""
    outcomes: collections.Counter = collections.Counter()
    failures: list[str] = []
    todo = list(paths)
    here = Path(__file__).resolve().parent
    # the repository (edge_export), tests/ (tools_models: the validate reference) and this folder
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parents[1]), str(here.parent), str(here)])}
    while todo:
        proc = subprocess.run(
            [sys.executable, str(WORKER), *worker_args],
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
                outcomes[" ".join(parts[2:])] += 1
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


# Each class of mutant (source file x mutation kind) is drawn this many times: every kind reaches the
# CLI from both files, as a random draw of kinds does not promise (and 240 random draws cost twice as much).
CLI_MUTANTS_PER_CLASS = 3


def cli_mutants(cnn_models, rng: random.Random) -> list[tuple[str, str, bytes]]:
    """(source, kind, bytes) for every source (fp32, int8) and every kind, byte-level and structure-aware."""
    from flatbuffer_mutations import KINDS as STRUCTURE_KINDS
    from flatbuffer_mutations import mutate as mutate_structure

    mutants = []
    for source in ("fp32", "int8"):
        data = getattr(cnn_models, source)
        for kind in BYTE_KINDS + STRUCTURE_KINDS:
            mutator = mutate if kind in BYTE_KINDS else mutate_structure
            mutants += [(source, *mutator(data, rng, kind)) for _ in range(CLI_MUTANTS_PER_CLASS)]
    return mutants


@pytest.mark.slow
def test_inspect_and_validate_survive_mutants(cnn_models, tmp_path):
    """`inspect` and `validate` (the real CLI, in a worker process) on random and structure-aware
    mutants of every kind, of both files: never a signal, an exit 4 or a traceback, and no native
    crash caught by the isolation."""
    paths = []
    for i, (source, kind, data) in enumerate(cli_mutants(cnn_models, random.Random(13_2026))):
        path = tmp_path / f"m{i:03d}_{source}_{kind}.tflite"
        path.write_bytes(data)
        paths.append(path)

    outcomes, failures = run_workers(paths, ("--cli", "tools_models:make_cnn", "1,3,16,16"))

    assert not failures, "a worker died:\n" + "\n".join(failures)
    assert sum(outcomes.values()) == len(paths)
    flags = collections.Counter(f for outcome in outcomes.elements() for f in outcome.split())
    bad = {f: n for f, n in flags.items() if f.split("=")[1] in ("traceback", "internal-error", "native-crash")}
    assert not bad, flags
    # Meaningful only with both kinds of file: most refused (exit 2), some validated (exit 0 or 1).
    assert flags["inspect=2"] > len(paths) // 3, flags
    assert flags["validate=0"] + flags["validate=1"] > len(paths) // 20, flags
