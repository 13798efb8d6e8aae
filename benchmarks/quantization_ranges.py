"""Does a range algorithm beyond min/max, or image-like synthetic calibration, pay on held-out inputs?

Part 1, range algorithms (`--range-algorithm minmax|percentile|mse`, each mapped onto both
backends' observers: edge_export/quantization/ranges.py): int8 with each backend and each algorithm,
SQNR of the logits vs PyTorch fp32 on held-out inputs, per model:
- the trained digits models (examples/digits: CNN at 8x8 and MobileNetV2-style at 16x16),
  calibrated on 128 training images, measured on the 360 test images (also the top-1 drop);
- the benchmark models (benchmarks/bench_models.py, random weights, BatchNorm statistics of random
  inputs), calibrated on 128 synthetic samples (the tool's default), measured on 16 other seeded
  random inputs (what `edge-export` checks parity on without --calibration-data).

Part 2, synthetic calibration when no data is given: int8 calibrated on 128 synthetic samples that
are either standard-normal noise (the default) or natural-image-like pictures normalized with the
model's mean/std (`synthetic_calibration(image_mean=..., image_std=...)`), or drawn like the
model's example input (`like=`, the tool's default since BENCHMARKS 23.6: for a picture example,
pictures and noise alternately), measured
- on the digits models (the only ones whose real inputs we have) on the real test images;
- on the benchmark image models (random weights: their domain is unknown) on two held-out sets of 16
  each, seeded standard-normal inputs (what the tool checks parity on without data) and image-like
  pictures of another seed, normalized with ImageNet's mean/std (the torchvision preprocessing a
  user of these architectures would pass as --mean/--std). The transformer's input is not an image:
  the tool gives it normal noise either way, so it has no row.

    python benchmarks/quantization_ranges.py [--models digits_cnn,digits_mobilenetv2,small_cnn] [--size 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DIGITS = ("digits_cnn", "digits_mobilenetv2")
BENCH = ("small_cnn", "mobilenetv2_like", "transformer", "resnet18", "mobilenetv2")
IMAGE_BENCH = ("small_cnn", "mobilenetv2_like", "resnet18", "mobilenetv2")
ALGORITHMS = ("minmax", "percentile", "mse")
BACKENDS = ("flatbuffer", "pt2e")


def _digits_module():
    spec = importlib.util.spec_from_file_location("digits_example", ROOT / "examples/digits/digits_example.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _digits_model(arch: str):
    import torch

    d = _digits_module()
    size = d.INPUT_SIZE[arch]
    x_train, x_test, y_train, y_test = d.load_split(0, size)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = d.train(d.build_model(arch), x_train, y_train, epochs=15 if arch == "cnn" else 30)
    torch.set_num_threads(threads)
    return model, x_train, x_test, y_test


def _quantize(model, example, calib, backend, algorithm, float_bytes):
    from edge_export.config import QuantBackend, QuantizeMode
    from edge_export.quantization import QuantizationRequest, quantize_model
    from edge_export.quantization.ranges import observers_for

    return quantize_model(model, example, QuantizationRequest(
        QuantizeMode.INT8, calibration=calib, backend=QuantBackend(backend), parity_samples=1, **observers_for(algorithm),
    ), float_model_bytes=float_bytes if backend == "flatbuffer" else None).model.data


def _logits(model_bytes, xs):
    from edge_export.runtime.interpreter import TFLiteRunner

    runner = TFLiteRunner(model_bytes, num_threads=1)
    return np.concatenate([runner.run([x])[0].reshape(1, -1) for x in xs])


def _reference(model, xs):
    import torch

    with torch.no_grad():
        return np.concatenate([model(torch.from_numpy(x)).numpy().reshape(1, -1) for x in xs])


def _case(name: str, size: int):
    """(model, example, calibration set, held-out inputs, labels or None)."""
    import torch

    from edge_export.config import InputSpec
    from edge_export.quantization import CalibrationSet, synthetic_calibration

    if name in DIGITS:
        model, x_train, x_test, y_test = _digits_model(name.split("_", 1)[1])
        calib = CalibrationSet(tuple((x_train[i : i + 1],) for i in range(128)), "digits train", True)
        return model, (torch.from_numpy(x_train[:1]),), calib, [x_test[i : i + 1] for i in range(len(x_test))], y_test
    from bench_models import ARCHITECTURES, build

    shape = ARCHITECTURES[name][1]
    if len(shape) == 4:
        shape = (shape[0], shape[1], size, size)
    model, example = build(name, shape)
    spec = InputSpec(tuple(shape))
    calib = synthetic_calibration([spec], 128, seed=1_000_003)
    held = synthetic_calibration([spec], 16, seed=0)
    return model, example, calib, [s[0] for s in held.samples], None


def bench_ranges(names: list[str], size: int, backends: tuple[str, ...] = BACKENDS) -> list[dict]:
    from edge_export.conversion.litert import convert_module
    from edge_export.validators.metrics import sqnr_db

    rows = []
    for name in names:
        model, example, calib, xs, labels = _case(name, size)
        ref = _reference(model, xs)
        float_bytes = convert_module(model, example)
        for backend in backends:
            for algorithm in ALGORITHMS:
                start = time.perf_counter()
                try:
                    data = _quantize(model, example, calib, backend, algorithm, float_bytes)
                except Exception as exc:  # noqa: BLE001 (a backend that cannot do the model: recorded, not fatal)
                    rows.append({"model": name, "backend": backend, "algorithm": algorithm, "error": str(exc)[:200]})
                    print(json.dumps(rows[-1]), flush=True)
                    continue
                out = _logits(data, xs)
                row = {
                    "model": name, "backend": backend, "algorithm": algorithm,
                    "sqnr_db": round(sqnr_db(ref, out), 2), "seconds": round(time.perf_counter() - start, 1),
                }
                if labels is not None:
                    row["drop_points"] = round(100 * (float((ref.argmax(1) == labels).mean()) - float((out.argmax(1) == labels).mean())), 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _synthetic_sets(name: str, spec, example) -> tuple[dict, dict]:
    """(calibration sets by kind, held-out input lists by kind) for part 2."""
    from edge_export.quantization import synthetic_calibration

    if name in DIGITS:
        # the digits are scaled to [0, 1]: mean 0, std 1 is their preprocessing
        mean, std = (0.0,), (1.0,)
    else:
        mean, std = IMAGENET_MEAN, IMAGENET_STD
    calibration = {
        "normal": synthetic_calibration([spec], 128, seed=1_000_003),
        "image-like": synthetic_calibration([spec], 128, seed=1_000_003, image_mean=mean, image_std=std),
        # the default since 23.6: drawn like the example (pictures and noise when it is a picture)
        "like-example": synthetic_calibration([spec], 128, seed=1_000_003, like=example),
    }
    held_out = {
        "normal": [s[0] for s in synthetic_calibration([spec], 16, seed=0).samples],
        "image-like": [s[0] for s in synthetic_calibration([spec], 16, seed=1, image_mean=mean, image_std=std).samples],
    }
    return calibration, held_out


def bench_synthetic(names: list[str], size: int) -> list[dict]:
    from edge_export.config import InputSpec
    from edge_export.conversion.litert import convert_module
    from edge_export.validators.metrics import sqnr_db

    rows = []
    for name in names:
        if name not in DIGITS and name not in IMAGE_BENCH:
            print(f"# {name}: no image input, synthetic calibration is normal noise either way", flush=True)
            continue
        model, example, _, digits_xs, labels = _case(name, size)
        spec = InputSpec(tuple(example[0].shape))
        calibration, held_out = _synthetic_sets(name, spec, example)
        if name in DIGITS:
            held_out = {"real test images": digits_xs}
        refs = {kind: _reference(model, xs) for kind, xs in held_out.items()}
        float_bytes = convert_module(model, example)
        for kind, calib in calibration.items():
            for backend in BACKENDS:
                start = time.perf_counter()
                data = _quantize(model, example, calib, backend, None, float_bytes)
                row = {"model": name, "synthetic": kind, "backend": backend, "seconds": round(time.perf_counter() - start, 1)}
                for held, xs in held_out.items():
                    out = _logits(data, xs)
                    row[f"sqnr_db on {held}"] = round(sqnr_db(refs[held], out), 2)
                    if labels is not None:
                        row["drop_points"] = round(100 * (float((refs[held].argmax(1) == labels).mean()) - float((out.argmax(1) == labels).mean())), 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DIGITS + BENCH))
    parser.add_argument("--size", type=int, default=64, help="image side of the benchmark image models")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="part 1's backends")
    parser.add_argument("--skip-ranges", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    opts = parser.parse_args(argv)
    names = [m for m in opts.models.split(",") if m]
    unknown = [m for m in names if m not in DIGITS + BENCH]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}")
    print(f"start {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()}", flush=True)
    result = {
        "ranges": [] if opts.skip_ranges else bench_ranges(names, opts.size, tuple(opts.backends.split(","))),
        "synthetic": [] if opts.skip_synthetic else bench_synthetic(names, opts.size),
    }
    print(f"end {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()}", flush=True)
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    print("| model | backend | " + " | ".join(ALGORITHMS) + " |\n|---|---|" + "---|" * len(ALGORITHMS))
    for name in names:
        for backend in BACKENDS:
            cells = []
            for algorithm in ALGORITHMS:
                r = next((r for r in result["ranges"] if r["model"] == name and r["backend"] == backend and r["algorithm"] == algorithm), None)
                cells.append("-" if r is None else ("failed" if "error" in r else f"{r['sqnr_db']:.1f}" + (f" ({r['drop_points']:.2f})" if "drop_points" in r else "")))
            if any(c != "-" for c in cells):
                print(f"| {name} | {backend} | " + " | ".join(cells) + " |")
    for r in result["synthetic"]:
        cells = "  ".join(f"{k.removeprefix('sqnr_db on ')}: {v} dB" for k, v in r.items() if k.startswith("sqnr_db"))
        drop = f"  drop {r['drop_points']} pts" if "drop_points" in r else ""
        print(f"synthetic {r['model']:<20}{r['synthetic']:<12}{r['backend']:<11}{cells}{drop}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
