"""Does calibration beyond the defaults pay? Activation-range observers x calibration sample counts.

Trains the digits CNN (examples/digits), then quantizes it to int8 with each backend, each observer
and several calibration set sizes (training images only), and measures on the 360 held-out images:
top-1 accuracy drop vs PyTorch fp32 (points) and logits SQNR vs PyTorch (dB). A second model, a
small transformer encoder on synthetic inputs (ranges from the same distribution it is measured
on), shows the observers where activations have heavier tails.

    python benchmarks/quantization_calibration.py [--samples 8,32,128,512] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = [
    ("pt2e", "histogram"),
    ("pt2e", "minmax"),
    ("pt2e", "moving_average"),
    ("flatbuffer", "moving_average"),
    ("flatbuffer", "minmax"),
    ("flatbuffer", "percentile"),
]


def _digits():
    spec = importlib.util.spec_from_file_location("digits_example", ROOT / "examples/digits/digits_example.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _quantize(model, example, calib, backend, observer, float_bytes):
    from edge_export.config import QuantBackend, QuantizeMode
    from edge_export.quantization import QuantizationRequest, quantize_model

    kwargs = {"pt2e_observer": observer} if backend == "pt2e" else {"flatbuffer_observer": observer}
    return quantize_model(model, example, QuantizationRequest(
        QuantizeMode.INT8, calibration=calib, backend=QuantBackend(backend), parity_samples=1, **kwargs,
    ), float_model_bytes=float_bytes).model.data


def _outputs(model_bytes, xs):
    from edge_export.runtime.interpreter import TFLiteRunner

    runner = TFLiteRunner(model_bytes, num_threads=1)
    return np.concatenate([runner.run([x])[0] for x in xs])


def bench_digits(sample_counts):
    import torch

    from edge_export.conversion.litert import convert_module
    from edge_export.quantization import CalibrationSet
    from edge_export.validators.metrics import sqnr_db

    d = _digits()
    x_train, x_test, y_train, y_test = d.load_split(0)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # see examples/digits: OpenMP spin-waits on a shared machine
    model = d.train(d.build_model(), x_train, y_train, epochs=15)
    torch.set_num_threads(threads)
    with torch.no_grad():
        ref = model(torch.from_numpy(x_test)).numpy()
    base = float((ref.argmax(1) == y_test).mean())
    example = (torch.from_numpy(x_train[:1]),)
    float_bytes = convert_module(model, example)
    xs = [x_test[i : i + 1] for i in range(len(x_test))]
    rows = []
    for n in sample_counts:
        calib = CalibrationSet(tuple((x_train[i : i + 1],) for i in range(n)), "digits train", True)
        for backend, observer in CONFIGS:
            start = time.perf_counter()
            data = _quantize(model, example, calib, backend, observer, float_bytes)
            seconds = time.perf_counter() - start
            out = _outputs(data, xs)
            top1 = float((out.argmax(1) == y_test).mean())
            rows.append({
                "model": "digits-cnn", "samples": n, "backend": backend, "observer": observer,
                "drop_points": round(100 * (base - top1), 2), "sqnr_db": round(sqnr_db(ref, out), 2),
                "seconds": round(seconds, 1),
            })
            print(json.dumps(rows[-1]), flush=True)
    return base, rows


def bench_encoder(sample_counts):
    import torch
    from torch import nn

    from edge_export.config import InputSpec
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization import synthetic_calibration
    from edge_export.validators.metrics import sqnr_db

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), num_layers=2
            )
            self.head = nn.Linear(32, 10)

        def forward(self, x):
            return self.head(self.layers(x).mean(dim=1))

    torch.manual_seed(0)
    model = Encoder().eval()
    spec = InputSpec((1, 16, 32))
    test = synthetic_calibration([spec], n=64, seed=99)
    xs = [s[0] for s in test.samples]
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(x)).numpy() for x in xs])
    example = (torch.from_numpy(xs[0]),)
    float_bytes = convert_module(model, example)
    rows = []
    for n in sample_counts:
        calib = synthetic_calibration([spec], n=n, seed=1)
        for backend, observer in CONFIGS:
            if backend == "pt2e" and n > 128:
                continue  # the histogram observer is slow on this many attention activations
            data = _quantize(model, example, calib, backend, observer, float_bytes)
            rows.append({
                "model": "encoder-2x32", "samples": n, "backend": backend, "observer": observer,
                "sqnr_db": round(sqnr_db(ref, _outputs(data, xs)), 2),
            })
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="8,32,128,512")
    parser.add_argument("--encoder-samples", default="8,32,128")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    counts = [int(s) for s in args.samples.split(",")]
    base, digits_rows = bench_digits(counts)
    encoder_rows = bench_encoder([int(s) for s in args.encoder_samples.split(",")])
    result = {"digits_pytorch_top1": base, "digits": digits_rows, "encoder": encoder_rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(f"\ndigits PyTorch top-1 {100 * base:.2f}%")
    print(f"{'model':<14}{'n':>5}  {'backend':<11}{'observer':<15}{'drop pts':>9}{'SQNR dB':>9}")
    for r in digits_rows + encoder_rows:
        drop = r.get("drop_points", "")
        print(f"{r['model']:<14}{r['samples']:>5}  {r['backend']:<11}{r['observer']:<15}{drop!s:>9}{r['sqnr_db']:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
