"""Train a small CNN on scikit-learn's bundled handwritten digits, export it four ways, and compare
top-1 accuracy on the held-out split: PyTorch fp32 vs the fp32, dynamic-int8, int8 and int16x8
flatbuffers run with LiteRT on the host.

    python examples/digits/digits_example.py [--quick] [--out DIR] [--backend auto|pt2e|flatbuffer]

The data ships with scikit-learn (1,797 8x8 images, no download). int8 is calibrated on training
images only; accuracy is measured on the 20% held out, which neither training nor calibration saw.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing


def load_split(seed: int = 0):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8) in [0, 1]
    return train_test_split(images, digits.target, test_size=0.2, random_state=seed, stratify=digits.target)


def build_model():
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )


def train(model, x, y, epochs: int, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xs))
        for i in range(0, len(xs), 64):
            idx = perm[i : i + 64]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
    return model.eval()


def torch_accuracy(model, x, y) -> float:
    import torch

    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def flatbuffer_accuracy(model_bytes: bytes, x, y) -> float:
    from edge_export.runtime import TFLiteRunner

    runner = TFLiteRunner(model_bytes, num_threads=1)
    preds = [int(np.argmax(runner.run([x[i : i + 1]])[0])) for i in range(len(x))]
    return float((np.array(preds) == y).mean())


ALL_MODES = ("dynamic-int8", "int8", "int16x8")


def run(
    quick: bool = False,
    out_dir: Path | None = None,
    backend: str = "auto",
    seed: int = 0,
    modes: tuple[str, ...] = ALL_MODES,
) -> dict:
    import torch

    from edge_export.config import QuantBackend, QuantizeMode
    from edge_export.conversion import convert_module
    from edge_export.quantization import CalibrationSet, quantize_model

    x_train, x_test, y_train, y_test = load_split(seed)
    start = time.perf_counter()
    torch.manual_seed(seed)
    # A model this small gains nothing from a second thread, and on a shared 2-core machine OpenMP
    # threads waiting on a descheduled peer made training up to 100x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = train(build_model(), x_train, y_train, epochs=4 if quick else 15, seed=seed)
    finally:
        torch.set_num_threads(threads)
    train_seconds = time.perf_counter() - start

    example = (torch.from_numpy(x_train[:1]),)
    n_calib = 32 if quick else 256
    calib = CalibrationSet(tuple((x_train[i : i + 1],) for i in range(n_calib)), "digits training images", True)

    results = {"train_seconds": round(train_seconds, 1), "test_images": len(y_test), "models": {}}
    results["models"]["pytorch"] = {"top1": torch_accuracy(model, x_test, y_test)}
    float_bytes = convert_module(model, example)
    artifacts = {"fp32": float_bytes}
    for mode in (QuantizeMode(m) for m in modes):
        q = quantize_model(
            model, example, mode, calibration=calib, backend=QuantBackend(backend),
            require_full_integer=mode == QuantizeMode.INT8, float_model_bytes=float_bytes,
        )
        artifacts[mode.value] = q.model_bytes
        results["models"][mode.value] = {"backend": q.backend, "fully_integer": q.fully_integer, "reason": q.reason}
    results["models"]["fp32"] = {}
    for name, data in artifacts.items():
        results["models"][name].update(top1=flatbuffer_accuracy(data, x_test, y_test), size_bytes=len(data))
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"digits_{name}.tflite").write_bytes(data)
    base = results["models"]["pytorch"]["top1"]
    for name, entry in results["models"].items():
        entry["drop_points"] = round(100.0 * (base - entry["top1"]), 2)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer epochs and calibration samples (for tests)")
    parser.add_argument("--out", type=Path, default=None, help="write the four .tflite files here")
    parser.add_argument("--backend", default="auto", choices=["auto", "pt2e", "flatbuffer"])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    results = run(quick=args.quick, out_dir=args.out, backend=args.backend)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"trained in {results['train_seconds']} s; {results['test_images']} held-out images")
    print(f"{'model':<14}{'top-1':>8}{'drop (pts)':>12}{'size (B)':>10}  backend")
    for name, e in results["models"].items():
        size = e.get("size_bytes", "")
        print(f"{name:<14}{100 * e['top1']:>7.2f}%{e['drop_points']:>12.2f}{size:>10}  {e.get('backend', '')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
