"""Export wall time and peak memory: `edge-export --no-validate` vs a plain litert_torch.convert script.

Both run as fresh processes on the same saved ExportedProgram, interleaved, in the same run, so import
time and machine load hit both alike. Also times `edge-export --help` start-up.

    .venv/bin/python benchmarks/export_overhead.py [--repeats 3] [--models small_cnn,resnet18,transformer]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Runs a command in-process and prints its wall time and peak RSS (ru_maxrss of this process).
_MEASURE = r"""
import json, resource, sys, time
start = time.perf_counter()
mode = sys.argv[1]
if mode == "edge-export":
    from edge_export.cli import main
    try:
        main(sys.argv[2:])
    except SystemExit as exc:
        code = exc.code
        if code not in (0, None):
            raise
else:
    import torch, litert_torch
    ep = torch.export.load(sys.argv[2])
    args, _ = ep.example_inputs
    litert_torch.convert(ep.module(), args).export(sys.argv[3])
wall = time.perf_counter() - start
print("MEASURE " + json.dumps({"seconds": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _measure(args: list[str]) -> dict:
    env = {**os.environ, "LITERT_TORCH_SHOW_PROGRESS": "n"}
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed:\n{proc.stderr[-2000:]}")
    line = next(l for l in proc.stdout.splitlines() if l.startswith("MEASURE "))
    return json.loads(line[len("MEASURE "):])


def _help_time(repeats: int) -> float:
    exe = Path(sys.executable).with_name("edge-export")
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([str(exe), "--help"], capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="small_cnn,resnet18,transformer")
    parser.add_argument("--json", type=Path, help="also write the results here")
    opts = parser.parse_args()

    sys.path.insert(0, str(HERE))
    import torch

    from bench_models import build

    results = {"help_seconds": _help_time(10), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in opts.models.split(","):
            model, args = build(name)
            pt2 = Path(tmp) / f"{name}.pt2"
            torch.export.save(torch.export.export(model, args), pt2)
            runs = {"edge-export": [], "plain": []}
            for _ in range(opts.repeats):  # interleaved
                runs["plain"].append(_measure(["plain", str(pt2), str(Path(tmp) / f"{name}_plain.tflite")]))
                runs["edge-export"].append(
                    _measure(["edge-export", str(pt2), "--no-validate", "--quiet", "-o", str(Path(tmp) / f"{name}_ee.tflite")])
                )
            row = {}
            for tool, rs in runs.items():
                row[tool] = {
                    "seconds": statistics.median(r["seconds"] for r in rs),
                    "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
                }
            row["time_ratio"] = row["edge-export"]["seconds"] / row["plain"]["seconds"]
            row["memory_ratio"] = row["edge-export"]["peak_rss_mb"] / row["plain"]["peak_rss_mb"]
            # edge-export aligns every buffer to 16 bytes, which the converter does not: the same
            # model means the plain file's bytes once aligned.
            from edge_export.flatbuffer import align_buffers

            plain_bytes = (Path(tmp) / f"{name}_plain.tflite").read_bytes()
            same = align_buffers(plain_bytes) == (Path(tmp) / f"{name}_ee.tflite").read_bytes()
            row["identical_flatbuffer"] = same
            results["models"][name] = row

    print(f"edge-export --help: {results['help_seconds'] * 1000:.0f} ms (median of 10)")
    print(f"{'model':<14} {'plain s':>8} {'edge-export s':>14} {'ratio':>6} {'plain MB':>9} {'edge-export MB':>15} {'ratio':>6} same-bytes")
    for name, r in results["models"].items():
        print(
            f"{name:<14} {r['plain']['seconds']:>8.2f} {r['edge-export']['seconds']:>14.2f} {r['time_ratio']:>6.2f} "
            f"{r['plain']['peak_rss_mb']:>9.0f} {r['edge-export']['peak_rss_mb']:>15.0f} {r['memory_ratio']:>6.2f} {r['identical_flatbuffer']}"
        )
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
