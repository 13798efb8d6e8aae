"""Why the random-weight YOLO11n of the trained-model benchmark loses its class scores under any
integer quantization, and what rounding alone costs the trained one: simulated in PyTorch, apart
from edge-export and LiteRT.

The network (benchmarks/trained_models.py's ``yolo11n`` case: Ultralytics' yaml, seeded random
weights, BatchNorm statistics measured on photo crops) with BatchNorm folded into its convolutions
(``fuse()``), then, one at a time: every conv's weights rounded to int8 or int16 per output channel;
one conv's weights alone at int8 (the most damaging listed); every conv's output rounded to int8 or
int16 per tensor over its calibration range, weights float. Each against the fused float network on
the held-out crops: SQNR of the boxes and of the class scores, and PyTorch's (anchor, class) pairs
above 0.25 that stay above it.

    /work/bench-venv/bin/python benchmarks/yolo_rounding.py [--case yolo11n|yolo_trained] [--single 12]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trained_models  # noqa: E402


def _run(net, data):
    with torch.no_grad():
        return [net(torch.from_numpy(x[0])).numpy() for x in data]


def _sqnr(ref, out) -> float:
    a, b = np.concatenate([x.ravel() for x in ref]), np.concatenate([x.ravel() for x in out])
    noise = float(((a - b) ** 2).sum())
    return float("inf") if noise == 0 else 10 * np.log10(float((a ** 2).sum()) / noise)


def _row(name, ref, out) -> str:
    kept = sum(int(((r[0, 4:] > 0.25) & (o[0, 4:] > 0.25)).sum()) for r, o in zip(ref, out))
    total = sum(int((r[0, 4:] > 0.25).sum()) for r in ref)
    boxes = _sqnr([r[0, :4] for r in ref], [o[0, :4] for o in out])
    scores = _sqnr([r[0, 4:] for r in ref], [o[0, 4:] for o in out])
    return f"| {name} | {boxes:.1f} | {scores:.1f} | {kept} of {total} |"


def _round_weights(net, bits: int, only: str | None = None):
    net, top = copy.deepcopy(net), 2 ** (bits - 1) - 1
    for name, mod in net.named_modules():
        if isinstance(mod, torch.nn.Conv2d) and only in (None, name):
            scale = (mod.weight.data.abs().amax(dim=(1, 2, 3), keepdim=True) / top).clamp_min(1e-12)
            mod.weight.data = torch.round(mod.weight.data / scale) * scale
    return net


def _conv_ranges(net, data) -> dict:
    ranges: dict = {}

    def observe(mod, inp, out):
        lo, hi = ranges.get(mod, (0.0, 0.0))
        ranges[mod] = (min(lo, out.min().item()), max(hi, out.max().item()))

    hooks = [m.register_forward_hook(observe) for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    _run(net, data)
    for h in hooks:
        h.remove()
    return ranges


def _with_rounded_activations(net, ranges, bits: int, data):
    def rounded(mod, inp, out):
        lo, hi = ranges[mod]
        scale = (hi - lo) / (2 ** bits - 1)
        zero = round(-lo / scale)
        return (torch.clamp(torch.round(out / scale) + zero, 0, 2 ** bits - 1) - zero) * scale

    hooks = [m.register_forward_hook(rounded) for m in ranges]
    try:
        return _run(net, data)
    finally:
        for h in hooks:
            h.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=6, help="list the N convs whose weights alone cost the most")
    parser.add_argument("--case", choices=("yolo11n", "yolo_trained"), default="yolo11n", help="the random-weight or the trained network")
    args = parser.parse_args()
    case = trained_models.CASES[args.case](Path("/tmp"))
    fused = copy.deepcopy(case.module.eval())
    fused.net.fuse()
    ref = _run(fused, case.held_out)
    print("| rounding (PyTorch, BatchNorm folded) | boxes dB | scores dB | pairs > 0.25 kept |\n|---|---|---|---|")
    for bits in (8, 16):
        print(_row(f"every conv's weights at int{bits} per channel, activations float", ref, _run(_round_weights(fused, bits), case.held_out)))
    ranges = _conv_ranges(fused, case.calibration)
    for bits in (8, 16):
        print(_row(f"every conv's output at int{bits} per tensor, weights float", ref, _with_rounded_activations(fused, ranges, bits, case.held_out)))
    convs = [n for n, m in fused.named_modules() if isinstance(m, torch.nn.Conv2d)]
    single = sorted(((_sqnr([r[0, 4:] for r in ref], [o[0, 4:] for o in _run(_round_weights(fused, 8, n), case.held_out)]), n) for n in convs))
    for scores_db, name in single[: args.single]:
        print(_row(f"only `{name}`'s weights at int8", ref, _run(_round_weights(fused, 8, name), case.held_out)))


if __name__ == "__main__":
    main()
