"""Fuzzing of the TorchScript allow-list reader: thousands of mutated real archives
(tests/torchscript_mutations.py: operator names swapped, file operators among them, statements added,
code and pickle bytes flipped, members renamed, doubled, dropped or cut, archives truncated), each
read by ``read_checked_torchscript``; with ``--load N``, the first N accepted ones also loaded
(torch.jit.load and the conversion in the read-confined child).

    .venv/bin/python benchmarks/torchscript_fuzz.py [--cases 5000] [--seed 11] [--load 20]

Prints one row per mutation (accepted, refused) and the slowest case. Exits 1 if a case ended in
anything but a checked archive or an exit-2 refusal, if an archive naming a file operator was
accepted, if a case took over 5 s, or if a load ended in anything but a model or exit 2/3.
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
sys.path[:0] = [str(ROOT / "tests")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--load", type=int, default=20)
    args = parser.parse_args()
    import torch
    from torchscript_mutations import build_sources, members, mutate, reaches_outside

    from edge_export.errors import EdgeExportError
    from edge_export.loading.sources import load_model
    from edge_export.loading.torchscript_archive import read_checked_torchscript

    rng = random.Random(args.seed)
    rows: dict = collections.defaultdict(collections.Counter)
    failures, slowest, loads = [], 0.0, collections.Counter()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        sources = [members(p) for p in build_sources(folder)]
        for case in range(args.cases):
            source = rng.randrange(len(sources))
            what, data = mutate(rng, sources[source])
            path = folder / "case.pt"
            path.write_bytes(data)
            start = time.monotonic()
            try:
                read_checked_torchscript(path)
                outcome = "accepted"
                if reaches_outside(data):
                    failures.append(f"case {case} ({what}): a file operator was accepted")
            except EdgeExportError as exc:
                outcome = "refused" if exc.exit_code == 2 else f"exit {exc.exit_code}"
            except Exception as exc:  # the fuzzer's finding: anything else is a bug
                outcome = f"crash {type(exc).__name__}"
                failures.append(f"case {case} ({what}): {type(exc).__name__}: {exc}")
            took = time.monotonic() - start
            slowest = max(slowest, took)
            if took > 5:
                failures.append(f"case {case} ({what}): {took:.1f} s")
            rows[what.split(":")[0]][outcome] += 1
            if outcome == "accepted" and source == 2 and sum(loads.values()) < args.load:
                try:
                    load_model(path, example_inputs=(torch.randn(1, 3, 8, 8),))
                    loads["model"] += 1
                except EdgeExportError as exc:
                    loads[f"exit {exc.exit_code}"] += 1
                    if exc.exit_code not in (2, 3):
                        failures.append(f"case {case} ({what}): load exit {exc.exit_code}")
    print(f"{'mutation':<12} " + " ".join(f"{k:>9}" for k in ("accepted", "refused")))
    for what, counts in sorted(rows.items()):
        print(f"{what:<12} {counts['accepted']:>9} {counts['refused']:>9}" + "".join(f"  {k}: {v}" for k, v in counts.items() if k not in ("accepted", "refused")))
    print(f"cases {args.cases}, slowest {slowest:.2f} s, loads {dict(loads)}")
    for line in failures[:20]:
        print("FAIL", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
