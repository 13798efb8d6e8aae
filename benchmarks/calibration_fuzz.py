"""Fuzzing of calibration folders: thousands of folders of good and hostile entries
(tests/image_mutations.py: truncated, bit-flipped and mislabelled PNG/JPEG files, headers declaring
up to 30000 x 30000 pixels, empty files, folders and FIFOs named like images, links out of the folder,
dangling links, hidden files, an .npy among the images), each read by ``load_calibration_data`` in a
worker process under an address-space limit; with ``--cli N``, the first N also through the real
CLI (an int8 export of a tiny .pt2, in the worker).

    .venv/bin/python benchmarks/calibration_fuzz.py [--cases 3000] [--seed 13] [--cli 40]

Prints one row per entry kind (folders holding it, how they ended) and the totals: slowest folder,
the worker's largest resident size. Exits 1 if a folder ended in anything but samples or exit 2
(exit 0/1 or 2 through the CLI), crashed the worker, took over 5 s or left output behind.
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
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "quantization")]


def tiny_pt2(folder: Path) -> Path:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(256, 3)).eval()
    path = folder / "tiny.pt2"
    torch.export.save(torch.export.export(net, (torch.zeros(1, 3, 8, 8),)), path)
    return path


def print_table(results: dict, kinds: dict, allowed: tuple[str, ...]) -> int:
    from image_mutations import KINDS

    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for folder, (outcome, _) in results.items():
        for kind in set(kinds[folder]):
            table[kind]["folders"] += 1
            table[kind][outcome if outcome in allowed else "other"] += 1
    columns = ("folders", *allowed, "other")
    print("| entry kind | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for kind in KINDS:
        print(f"| {kind} | " + " | ".join(str(table[kind][c]) for c in columns) + " |")
    totals = collections.Counter(outcome for outcome, _ in results.values())
    print(f"| **all folders** | **{len(results)}** | " + " | ".join(f"**{totals[c]}**" for c in allowed)
          + f" | **{sum(n for o, n in totals.items() if o not in allowed)}** |")
    return sum(n for o, n in totals.items() if o not in allowed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--cli", type=int, default=0, metavar="N", help="also run the first N folders through the CLI")
    args = parser.parse_args()
    from calibration_fuzz_worker import run_worker
    from image_mutations import make_case

    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="calibration-fuzz-") as tmp:
        root = Path(tmp)
        folders, kinds = [], {}
        for i in range(args.cases):
            folder = root / f"case{i:05d}"
            kinds[str(folder)] = make_case(folder, root / "outside", rng)
            folders.append(str(folder))
        start = time.perf_counter()
        results, failures, peak = run_worker(folders, ("--memory-mib", "1536"), timeout=3600)
        seconds = time.perf_counter() - start
        bad = print_table(results, kinds, ("ok", "exit2"))
        slowest = max(results.items(), key=lambda item: item[1][1])
        print(f"\n{args.cases} folders (seed {args.seed}) in {seconds:.0f} s; slowest {slowest[1][1]:.2f} s "
              f"({kinds[slowest[0]]}); worker peak {peak} MiB; crashes: {len(failures)}; other outcomes: {bad}")
        for line in failures:
            print("  " + line)
        if args.cli:
            model = tiny_pt2(root)
            cli_results, cli_failures, _ = run_worker(folders[: args.cli], ("--cli", str(model)), timeout=3600)
            print(f"\nthrough the CLI ({args.cli} folders, int8 export of a tiny .pt2):\n")
            bad += print_table(cli_results, kinds, ("0", "1", "2"))
            failures += cli_failures
            for line in cli_failures:
                print("  " + line)
    sys.exit(1 if failures or bad or slowest[1][1] > 5.0 else 0)


if __name__ == "__main__":
    main()
