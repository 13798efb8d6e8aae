"""The flatbuffer backend's MSE range search: time of the running-sum evaluation against the
per-value one it replaced, on the activations of real models, and whether both pick the same ranges.

Quantizes each model with `--range-algorithm mse` on the flatbuffer backend; every call of
`flatbuffer_recipes.mse_range` (one per activation tensor, on the values kept from all calibration
samples) is run twice back to back, with the running-sum evaluation (the library's) and with the
per-value evaluation (each candidate range a pass over every value: the search before), timed, and
the two chosen ranges compared. Back-to-back timing in one process makes the ratio robust to the
machine's load; the absolute seconds are not.

    python benchmarks/mse_range_search.py [--models small_cnn,mobilenetv2_like] [--size 64] [--samples 32]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]


def per_value_mse_range(values, lo, hi, levels=255):
    """mse_range with every candidate evaluated over every value (the search before the speed-up)."""
    from edge_export.quantization.flatbuffer_recipes import mse_range

    return mse_range(values, lo, hi, levels, per_value=True)


def measure(name: str, size: int, samples: int) -> dict:
    from bench_models import ARCHITECTURES, build

    from edge_export.config import InputSpec, QuantizeMode
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization import flatbuffer_recipes, synthetic_calibration

    shape = ARCHITECTURES[name][1]
    shape = (shape[0], shape[1], size, size) if len(shape) == 4 else shape
    model, example = build(name, shape)
    float_bytes = convert_module(model, example)
    calib = synthetic_calibration([InputSpec(tuple(shape))], samples, seed=1_000_003)
    library = flatbuffer_recipes.mse_range
    stats = {"model": name, "tensors": 0, "values": 0, "same_ranges": 0, "sorted_s": 0.0, "per_value_s": 0.0}

    def both(values, lo, hi, levels=255):
        start = time.perf_counter()
        fast = library(values, lo, hi, levels)
        middle = time.perf_counter()
        slow = per_value_mse_range(values, lo, hi, levels)
        stats["sorted_s"] += middle - start
        stats["per_value_s"] += time.perf_counter() - middle
        stats["tensors"] += 1
        stats["values"] += int(np.size(values))
        stats["same_ranges"] += int(fast == slow)
        return fast

    flatbuffer_recipes.mse_range = both
    try:
        flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode.INT8, calib, observer="mse")
    finally:
        flatbuffer_recipes.mse_range = library
    return stats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="small_cnn,mobilenetv2_like")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--samples", type=int, default=32, help="calibration samples (values kept: up to 20,000 per tensor per sample)")
    opts = parser.parse_args(argv)
    print(f"start {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()}", flush=True)
    print("| model | tensors searched | values per tensor (mean) | same ranges | running sums s | per value s | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for name in [m for m in opts.models.split(",") if m]:
        r = measure(name, opts.size, opts.samples)
        print(
            f"| {name} | {r['tensors']} | {r['values'] // max(r['tensors'], 1):,} | {r['same_ranges']}/{r['tensors']} | "
            f"{r['sorted_s']:.1f} | {r['per_value_s']:.1f} | {r['per_value_s'] / max(r['sorted_s'], 1e-9):.1f}x |",
            flush=True,
        )
    print(f"end {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
