"""Which benchmark models the export report flags as slower than fp32 on this host (issue 12).

Exports each model of bench_models.py in each quantized mode through the Python API (flatbuffer
backend, no parity check, no mixed-precision search: only the float conversion, the quantization and
the report's own `host_latency` timing run) and prints the report's `host_latency` figures: the
written model against the float model it came from, timed interleaved by the export itself.

    .venv/bin/python benchmarks/host_latency_flag.py [--models small_cnn,mobilenetv2,...]
        [--modes int8,dynamic-int8,int16x8] [--size 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(HERE)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="small_cnn,resnet18,mobilenetv2,mobilenetv2_like,transformer")
    parser.add_argument("--modes", default="int8,dynamic-int8,int16x8")
    parser.add_argument("--size", type=int, default=64, help="image side for the image models")
    args = parser.parse_args()

    from bench_models import ARCHITECTURES, build

    from edge_export.api import export

    print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    print("| model | mode | quantized ms | fp32 ms | ratio | flagged |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            shape = ARCHITECTURES[name][1]
            is_image = len(shape) == 4
            model, example = build(name, (1, 3, args.size, args.size) if is_image else shape)
            for mode in args.modes.split(","):
                result = export(
                    model, example_inputs=example, output=Path(folder) / f"{name}_{mode}.tflite", quantize=mode,
                    channels_last=is_image, quant_backend="flatbuffer", validate=False, mixed_precision="off",
                )
                h = result.report.get("host_latency")
                if h is None:
                    print(f"| {name} | {mode} | – | – | – | not measured |", flush=True)
                    continue
                print(
                    f"| {name} | {mode} | {h['quantized_ms']:.3g} | {h['float_ms']:.3g} | {h['ratio']:.2f} | "
                    f"{'**yes**' if h['slower'] else 'no'} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
