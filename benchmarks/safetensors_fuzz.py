"""Structure-aware fuzzing of the safetensors header reader (edge_export/llm/safetensors_header.py):
mutants of a small valid file (tests/llm/model_folder_mutations.py: the length field, flipped,
cut, appended and replaced header bytes; dtype, shape, data_offsets, metadata and entries retyped,
shifted, swapped, duplicated, removed), each read by the reader and, when it accepts, opened by the
safetensors library itself (its own Rust header check) and compared tensor by tensor.

    .venv/bin/python benchmarks/safetensors_fuzz.py [--cases 100000] [--seed 5]

A case fails the run when the reader raises anything but ModelLoadError (exit 2), accepts a file the
safetensors library refuses or reads differently, or takes more than a second. Prints one row per
mutation kind (accepted / refused) and the totals; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "llm"))


def _same_as_safetensors(header, path: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            theirs = {k: f.get_slice(k).get_shape() for k in f.keys()}
    except Exception:  # noqa: BLE001 - the library refused what the reader accepted
        return False
    return theirs == {t.name: list(t.shape) for t in header.tensors}


def _case(data: bytes, path: Path) -> tuple[str, float]:
    from edge_export.errors import ModelLoadError
    from edge_export.llm.safetensors_header import read_safetensors_header

    path.write_bytes(data)
    started = time.perf_counter()
    try:
        header = read_safetensors_header(path)
    except ModelLoadError:
        return "refused", time.perf_counter() - started
    except Exception as exc:  # noqa: BLE001 - the failure this benchmark looks for
        return f"FAILED {type(exc).__name__}: {exc}"[:200], 0.0
    seconds = time.perf_counter() - started
    return ("accepted" if _same_as_safetensors(header, path) else "FAILED accepted, safetensors disagrees"), seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    from model_folder_mutations import mutate_safetensors, valid_safetensors

    valid, rng = valid_safetensors(), random.Random(args.seed)
    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures, slowest, started = [], 0.0, time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutant.safetensors"
        for i in range(args.cases):
            kind, data = mutate_safetensors(valid, rng)
            outcome, seconds = _case(data, path)
            slowest = max(slowest, seconds)
            if outcome.startswith("FAILED") or seconds > 1.0:
                failures.append((i, kind, outcome, seconds))
            rows[kind]["accepted" if outcome == "accepted" else "refused" if outcome == "refused" else "failed"] += 1
    print(f"{'mutation':28} {'accepted':>9} {'refused':>9} {'failed':>7}")
    for kind in sorted(rows):
        print(f"{kind:28} {rows[kind]['accepted']:9d} {rows[kind]['refused']:9d} {rows[kind]['failed']:7d}")
    total = sum(rows.values(), collections.Counter())
    print(f"{'total':28} {total['accepted']:9d} {total['refused']:9d} {total['failed']:7d}")
    print(f"{args.cases} cases (seed {args.seed}) in {time.monotonic() - started:.1f} s; slowest read {slowest * 1000:.1f} ms")
    for failure in failures[:20]:
        print("FAILED case", *failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
