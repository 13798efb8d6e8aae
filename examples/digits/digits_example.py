"""Train a small CNN on scikit-learn's bundled handwritten digits, export it four ways, and compare
top-1 accuracy on the held-out split: PyTorch fp32 vs the fp32, dynamic-int8, int8 and int16x8
flatbuffers run with LiteRT on the host.

    python examples/digits/digits_example.py [--quick] [--out DIR] [--backend auto|pt2e|flatbuffer]
                                             [--arch cnn|mobilenetv2] [--per-layer]

The data ships with scikit-learn (1,797 8x8 images, no download). int8 is calibrated on training
images only; accuracy is measured on the 20% held out, which neither training nor calibration saw.

``--arch mobilenetv2`` trains a small MobileNetV2-style network instead (stem conv, inverted
residual blocks with 1x1 expansion, depthwise 3x3 + ReLU6, 1x1 linear projection, residual adds,
global average pool, linear) on the images upsampled to 16x16, and also prints each quantized
model's logits SQNR and cosine against PyTorch (on the calibration inputs, as the quantizer measured
them to choose a backend, and on the held-out images).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing


def load_split(seed: int = 0, size: int = 8):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8) in [0, 1]
    if size != 8:
        images = _upsample(images, size)
    return train_test_split(images, digits.target, test_size=0.2, random_state=seed, stratify=digits.target)


def _upsample(images: np.ndarray, size: int) -> np.ndarray:
    """Bilinear upsampling (N, 1, 8, 8) -> (N, 1, size, size), so that strided layers have room."""
    import torch

    with torch.no_grad():
        up = torch.nn.functional.interpolate(
            torch.from_numpy(images), size=(size, size), mode="bilinear", align_corners=False
        )
    return np.ascontiguousarray(up.numpy(), dtype=np.float32)


# Input side length per architecture: the MobileNetV2-style network downsamples 16 -> 8 -> 4.
INPUT_SIZE = {"cnn": 8, "mobilenetv2": 16}
ARCHS = tuple(INPUT_SIZE)


def build_model(arch: str = "cnn"):
    from torch import nn

    if arch == "mobilenetv2":
        return build_mobilenetv2()
    if arch != "cnn":
        raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )


def build_mobilenetv2(num_classes: int = 10):
    """A MobileNetV2-style network for 1x16x16 inputs (about 27k parameters).

    stem 3x3 conv (16) -> inverted residual blocks (expansion t, output channels c, stride s):
    (4, 24, 2), (4, 24, 1) + residual, (4, 32, 2), (4, 32, 1) + residual -> 1x1 conv (64) -> global
    average pool (mean over H, W) -> linear. Each block: 1x1 expansion conv + BN + ReLU6, depthwise
    3x3 conv + BN + ReLU6, 1x1 projection conv + BN (linear bottleneck, no activation).
    """
    import torch
    from torch import nn

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            self.use_res = stride == 1 and cin == cout
            self.expand = nn.Sequential(nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6())
            self.depthwise = nn.Sequential(
                nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()
            )
            self.project = nn.Sequential(nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.project(self.depthwise(self.expand(x)))
            return x + y if self.use_res else y

    class MobileNetV2Digits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
            blocks, cin = [], 16
            for t, c, s in ((4, 24, 2), (4, 24, 1), (4, 32, 2), (4, 32, 1)):
                blocks.append(InvertedResidual(cin, c, s, t))
                cin = c
            self.blocks = nn.Sequential(*blocks)
            self.head = nn.Sequential(nn.Conv2d(cin, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6())
            self.classifier = nn.Linear(64, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(self.head(self.blocks(self.stem(x))).mean(dim=(2, 3)))

    return MobileNetV2Digits()


def train(model, x, y, epochs: int, seed: int = 0, cosine_lr: bool = False):
    """Adam at 3e-3; ``cosine_lr`` decays it to 0 over the run, so that the accuracy does not depend
    on where the last epoch happened to leave a constant-rate run (the MobileNetV2-style network's
    did: 90-99% depending on the epoch count)."""
    import torch

    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    steps = epochs * -(-len(xs) // 64)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps) if cosine_lr else None
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xs))
        for i in range(0, len(xs), 64):
            idx = perm[i : i + 64]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
    return model.eval()


def torch_accuracy(model, x, y) -> float:
    import torch

    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def flatbuffer_accuracy(model_bytes: bytes, x, y) -> float:
    return float((flatbuffer_logits(model_bytes, x).argmax(1) == y).mean())


def flatbuffer_logits(model_bytes: bytes, x) -> np.ndarray:
    from edge_export.runtime.interpreter import TFLiteRunner

    runner = TFLiteRunner(model_bytes, num_threads=1)
    return np.concatenate([np.asarray(runner.run([x[i : i + 1]])[0]).reshape(1, -1) for i in range(len(x))])


ALL_MODES = ("dynamic-int8", "int8", "int16x8")
ATTEMPT_KEYS = ("backend", "ok", "fully_integer", "sqnr_db", "cosine", "error")  # per backend auto tried


def run(
    quick: bool = False,
    out_dir: Path | None = None,
    backend: str = "auto",
    seed: int = 0,
    modes: tuple[str, ...] = ALL_MODES,
    arch: str = "cnn",
    epochs: int | None = None,
    per_layer: bool = False,
) -> dict:
    """Train, export and measure. For ``arch="cnn"`` the results are those the example has always
    printed; other architectures add each model's logits parity against PyTorch (``sqnr_db`` and
    ``cosine`` on the calibration inputs, ``test_sqnr_db`` and ``test_cosine`` on the held-out
    images, and for quantized modes the backends ``auto`` tried). ``per_layer`` adds the int8
    model's per-layer parity on 16 held-out images (``results["per_layer"]``)."""
    import torch

    from edge_export.config import QuantBackend, QuantizeMode
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization import CalibrationSet, QuantizationRequest, quantize_model
    from edge_export.output.serialize import to_json_value
    from edge_export.validators.metrics import cosine_similarity, sqnr_db

    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    detailed = arch != "cnn"
    if epochs is None:
        epochs = {"cnn": (15, 4), "mobilenetv2": (15, 8)}[arch][bool(quick)]
    x_train, x_test, y_train, y_test = load_split(seed, INPUT_SIZE[arch])
    start = time.perf_counter()
    torch.manual_seed(seed)
    # A model this small gains nothing from a second thread, and on a shared 2-core machine OpenMP
    # threads waiting on a descheduled peer made training up to 100x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = train(build_model(arch), x_train, y_train, epochs=epochs, seed=seed, cosine_lr=arch != "cnn")
    finally:
        torch.set_num_threads(threads)
    train_seconds = time.perf_counter() - start

    example = (torch.from_numpy(x_train[:1]),)
    n_calib = 32 if quick else 256
    calib = CalibrationSet(tuple((x_train[i : i + 1],) for i in range(n_calib)), "digits training images", True)

    results = {"train_seconds": round(train_seconds, 1), "test_images": len(y_test), "models": {}}
    if detailed:
        results.update(arch=arch, epochs=epochs, calibration_samples=n_calib)
    results["models"]["pytorch"] = {"top1": torch_accuracy(model, x_test, y_test)}
    with torch.no_grad():
        ref_test = model(torch.from_numpy(x_test)).numpy()
    float_bytes = convert_module(model, example)
    artifacts = {"fp32": float_bytes}
    for mode in (QuantizeMode(m) for m in modes):
        request = QuantizationRequest(
            mode, calibration=calib, backend=QuantBackend(backend), require_full_integer=mode == QuantizeMode.INT8,
        )
        q = quantize_model(model, example, request, float_model_bytes=float_bytes)
        artifacts[mode.value] = q.model.data
        results["models"][mode.value] = {"backend": q.backend, "fully_integer": q.fully_integer, "reason": q.reason}
        if detailed:
            results["models"][mode.value].update(
                sqnr_db=q.sqnr_db, cosine=q.cosine,
                attempts=[{k: to_json_value(a)[k] for k in ATTEMPT_KEYS} for a in q.attempts],
            )
    results["models"]["fp32"] = {}
    for name, data in artifacts.items():
        logits = flatbuffer_logits(data, x_test)
        results["models"][name].update(top1=float((logits.argmax(1) == y_test).mean()), size_bytes=len(data))
        if detailed:
            results["models"][name].update(
                test_sqnr_db=round(sqnr_db(ref_test, logits), 2),
                test_cosine=round(cosine_similarity(ref_test, logits), 6),
            )
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"digits_{name}.tflite").write_bytes(data)
    base = results["models"]["pytorch"]["top1"]
    for name, entry in results["models"].items():
        entry["drop_points"] = round(100.0 * (base - entry["top1"]), 2)
    if per_layer and "int8" in artifacts:
        results["per_layer"] = int8_per_layer(model, example, artifacts["int8"], x_test[:16])
    return results


def int8_per_layer(model, example: tuple, model_bytes: bytes, images: np.ndarray) -> dict:
    """Per-layer parity of the int8 flatbuffer against PyTorch (edge_export's --per-layer), each
    layer's SQNR (dB) and cosine averaged over ``images``, plus the mean SQNR per layer type."""
    from edge_export.validators.layers import per_layer_parity

    report = per_layer_parity(model, example, model_bytes, samples=[(images[i : i + 1],) for i in range(len(images))])
    layers = [
        {
            "module": r.label, "type": r.module_type, "opcode": r.opcode, "sqnr_db": round(r.sqnr_db, 2),
            "cosine": round(r.cosine, 5), "fused": list(r.fused_modules),
        }
        for r in report.layers
    ]
    return {
        "samples": len(images),
        "layers": layers,
        "first_jump": report.first_jump.label if report.first_jump else None,
        "worst": report.worst.label if report.worst else None,
        "match_fraction": round(report.match_fraction, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer epochs and calibration samples (for tests)")
    parser.add_argument("--out", type=Path, default=None, help="write the four .tflite files here")
    parser.add_argument("--backend", default="auto", choices=["auto", "pt2e", "flatbuffer"])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--arch", default="cnn", choices=ARCHS, help="the network to train (default: cnn)")
    parser.add_argument("--epochs", type=int, default=None, help="override the number of training epochs")
    parser.add_argument(
        "--per-layer", action="store_true", help="also compare every layer of the int8 model with PyTorch"
    )
    args = parser.parse_args(argv)
    results = run(
        quick=args.quick, out_dir=args.out, backend=args.backend, arch=args.arch, epochs=args.epochs,
        per_layer=args.per_layer,
    )
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    if args.arch == "cnn":
        print(f"trained in {results['train_seconds']} s; {results['test_images']} held-out images")
        print(f"{'model':<14}{'top-1':>8}{'drop (pts)':>12}{'size (B)':>10}  backend")
        for name, e in results["models"].items():
            size = e.get("size_bytes", "")
            print(f"{name:<14}{100 * e['top1']:>7.2f}%{e['drop_points']:>12.2f}{size:>10}  {e.get('backend', '')}")
    else:
        _print_detailed(results)
    if "per_layer" in results:
        _print_per_layer(results["per_layer"])
    return 0


def _print_detailed(results: dict) -> None:
    print(
        f"{results['arch']}: trained {results['epochs']} epochs in {results['train_seconds']} s; "
        f"{results['test_images']} held-out images; {results['calibration_samples']} calibration images"
    )
    print(
        "logits SQNR (dB) / cosine vs PyTorch: 'calib' on the first 16 calibration inputs (what auto compares), "
        "'test' on the held-out images"
    )
    print(
        f"{'model':<14}{'top-1':>8}{'drop (pts)':>12}{'size (B)':>10}{'calib SQNR':>12}{'cosine':>10}"
        f"{'test SQNR':>11}{'cosine':>10}  backend (auto tried)"
    )
    for name, e in results["models"].items():
        size = e.get("size_bytes", "")
        calib = f"{e['sqnr_db']:>12.1f}{e['cosine']:>10.5f}" if e.get("sqnr_db") is not None else f"{'':>22}"
        test = f"{e['test_sqnr_db']:>11.1f}{e['test_cosine']:>10.5f}" if "test_sqnr_db" in e else f"{'':>21}"
        tried = ", ".join(
            f"{a['backend']} {a['sqnr_db']:.1f} dB" if a["ok"] else f"{a['backend']} failed"
            for a in e.get("attempts", ())
        )
        backend = f"{e.get('backend', '')} ({tried})" if tried else e.get("backend", "")
        print(f"{name:<14}{100 * e['top1']:>7.2f}%{e['drop_points']:>12.2f}{size:>10}{calib}{test}  {backend}")


def _print_per_layer(pl: dict) -> None:
    print(
        f"\nint8 per-layer parity on {pl['samples']} held-out images "
        f"(first jump: {pl['first_jump']}; worst: {pl['worst']})"
    )
    print(f"{'layer':<28}{'type':<18}{'op':<18}{'SQNR':>7}{'cosine':>10}")
    for r in pl["layers"]:
        print(f"{r['module']:<28}{r['type']:<18}{r['opcode']:<18}{r['sqnr_db']:>7.1f}{r['cosine']:>10.5f}")


if __name__ == "__main__":
    raise SystemExit(main())
