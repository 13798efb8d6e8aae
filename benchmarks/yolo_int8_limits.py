"""Where an all-int8 YOLO11n loses its class scores, and whether training for int8 gets them back.

The Edge TPU runs int8 only: nothing can be raised to int16 or float there, and the trained YOLO11n's
class scores stay near 13 dB (docs/BENCHMARKS.md sections 38-39, 45). This script asks how much of
that each half of int8 costs, apart from the tool, in a PyTorch simulation of the int8 model:

- weights: per-channel symmetric int8 (max|w| / 127, nearest rounding) of every convolution, BatchNorm
  folded first (as the exported model has it);
- activations: per-tensor asymmetric int8 with min/max ranges from the calibration crops, on every
  convolution's output and, for a SiLU (x * sigmoid(x), three int8 tensors in LiteRT), on its input
  (cut below at -6.24, as sigmoid_ranges.py cuts it), on the sigmoid (LiteRT's fixed 1/256 scale) and
  on the product. Adds, concatenations, pooling and the attention's products stay float, so the
  simulation errs on the kind side.

    python benchmarks/yolo_int8_limits.py --work DIR [--qat-steps 400 --lr 1e-4]

Reports the scores' and boxes' SQNR on the 24 held-out crops of benchmarks/trained_models.py's
``yolo_trained`` case (the same photos, the same crops) for: everything int8; int8 weights with
float activations; float weights with int8 activations; the ten convolutions whose weights cost most
left float; and, with ``--qat-steps``, quantization-aware training of the weights (straight-through
rounding, fixed ranges) toward the float model's outputs on the 64 calibration crops, then the
ranges measured again. Needs the benchmark environment (ultralytics; docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
SIGMOID_BOUND = math.log(2 * 256 - 1)  # quantization/sigmoid_ranges.py's int8 bound


class Range:
    """One activation tensor's int8 quantizer: observes min/max, then fake-quantizes (straight-through)."""

    def __init__(self, cut_below: bool = False) -> None:
        self.lo, self.hi, self.cut_below, self.observing, self.enabled = math.inf, -math.inf, cut_below, True, True

    def __call__(self, x):
        import torch

        if self.observing:
            self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))
            return x
        if not self.enabled or not math.isfinite(self.lo):
            return x
        lo, hi = min(self.lo, 0.0), max(self.hi, 0.0)
        lo = max(lo, -SIGMOID_BOUND) if self.cut_below else lo
        scale = max(hi - lo, 1e-12) / 255
        zero = round(-lo / scale) - 128
        y = (torch.clamp(torch.round(x / scale) + zero, -128, 127) - zero) * scale
        return x + (y - x).detach()


def fixed_sigmoid(x):
    """LiteRT's int8 LOGISTIC output: scale 1/256, zero point -128."""
    import torch

    y = torch.clamp(torch.round(x * 256), 0, 255) / 256
    return x + (y - x).detach()


def int8_weights(w):
    import torch

    scale = w.detach().abs().amax(dim=tuple(range(1, w.dim())), keepdim=True).clamp_min(1e-9) / 127
    y = torch.clamp(torch.round(w / scale), -127, 127) * scale
    return w + (y - w).detach()


class Simulation:
    """The case's network with int8 fake quantization patched into its convolutions and SiLUs."""

    def __init__(self, case) -> None:
        import torch
        from ultralytics.nn.modules.conv import Conv

        self.case, self.model, self.ranges = case, case.module, []
        self.weights_int8, self.float_weights = True, set()
        net = case.module.net
        net.fuse()
        net.eval()
        inner = {id(m.conv) for m in net.modules() if isinstance(m, Conv)}
        for module in net.modules():
            if isinstance(module, Conv):
                self._patch_block(module)
            elif isinstance(module, torch.nn.Conv2d) and id(module) not in inner:
                self._patch_plain(module)
        self.convs = {name: m for name, m in net.named_modules() if isinstance(m, torch.nn.Conv2d)}

    def _conv(self, conv, x):
        import torch.nn.functional as F

        w = int8_weights(conv.weight) if self.weights_int8 and id(conv) not in self.float_weights else conv.weight
        return F.conv2d(x, w, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)

    def _patch_block(self, block) -> None:
        import torch

        silu = isinstance(block.act, torch.nn.SiLU)
        before, after = Range(cut_below=silu), Range()
        self.ranges += [before, after]
        sim = self

        def forward(self, x):
            y = before(sim._conv(self.conv, x))
            return after(y * fixed_sigmoid(torch.sigmoid(y))) if silu else self.act(y)

        block.forward = types.MethodType(forward, block)

    def _patch_plain(self, conv) -> None:
        out = Range()
        self.ranges.append(out)
        sim = self
        conv.forward = types.MethodType(lambda self, x: out(sim._conv(self, x)), conv)

    def run(self, x, batch: int = 8):
        import torch

        return torch.cat([self.model(x[i:i + batch]) for i in range(0, len(x), batch)])

    def calibrate(self, x) -> None:
        import torch

        for r in self.ranges:
            r.lo, r.hi, r.observing = math.inf, -math.inf, True
        with torch.no_grad():
            self.run(x)
        for r in self.ranges:
            r.observing = False

    def set(self, *, weights: bool = True, activations: bool = True) -> None:
        self.weights_int8 = weights
        for r in self.ranges:
            r.enabled = activations


def sqnr(ref, out) -> float:
    ref, out = np.asarray(ref, np.float64), np.asarray(out, np.float64)
    noise = float(((ref - out) ** 2).sum())
    return math.inf if noise == 0 else 10 * math.log10(float((ref ** 2).sum()) / noise)


def measure(sim: Simulation, held, ref) -> dict:
    import torch

    with torch.no_grad():
        out = sim.run(held).numpy()
    r = [[ref[i:i + 1]] for i in range(len(ref))]
    o = [[out[i:i + 1]] for i in range(len(out))]
    task = sim.case.metric(r, o, sim.case)
    return {"scores_db": round(sqnr(ref[:, 4:], out[:, 4:]), 2), "boxes_db": round(sqnr(ref[:, :4], out[:, :4]), 2),
            "kept_above": round(task["kept_above"], 3), "added_above": task["added_above"], "pairs_above": task["pairs_above"]}


def costliest_weights(sim: Simulation, held, ref, count: int) -> list[tuple[str, float]]:
    """The convolutions whose int8 weights cost the scores most (each left float alone, activations float)."""
    sim.set(activations=False)
    base = measure(sim, held, ref)["scores_db"]
    gains = []
    for name, conv in sim.convs.items():
        sim.float_weights = {id(conv)}
        gains.append((name, measure(sim, held, ref)["scores_db"] - base))
    sim.float_weights = set()
    sim.set()
    return sorted(gains, key=lambda g: -g[1])[:count]


def train_for_int8(sim: Simulation, cal, cal_ref, steps: int, lr: float, log) -> None:
    """Straight-through QAT of the weights toward the float outputs (relative squared error of the
    scores and of the boxes), batches of 8 calibration crops, ranges fixed."""
    import torch

    opt = torch.optim.Adam(sim.model.parameters(), lr=lr)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for step in range(steps):
        pick = torch.from_numpy(rng.choice(len(cal), 8, replace=False))
        out, ref = sim.model(cal[pick]), cal_ref[pick]
        loss = sum(((out[:, p] - ref[:, p]) ** 2).sum() / (ref[:, p] ** 2).sum() for p in (slice(0, 4), slice(4, None)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % 100 == 0 or step + 1 == steps:
            log(f"  QAT step {step + 1}/{steps}: loss {loss.item():.4f}, {time.perf_counter() - start:.0f} s")


def main() -> None:
    import torch

    import trained_models

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="benchmarks/trained_models.py's work directory")
    parser.add_argument("--qat-steps", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()
    torch.manual_seed(0)
    case = trained_models.yolo_trained(args.work)
    sim = Simulation(case)
    cal = torch.from_numpy(np.concatenate([c[0] for c in case.calibration]))
    held = torch.from_numpy(np.concatenate([c[0] for c in case.held_out]))
    sim.set(weights=False, activations=False)
    with torch.no_grad():
        cal_ref, ref = sim.run(cal), sim.run(held).numpy()
    sim.calibrate(cal)
    rows = {}
    for label, weights, activations in (("all int8", True, True), ("int8 weights, float activations", True, False),
                                        ("float weights, int8 activations", False, True)):
        sim.set(weights=weights, activations=activations)
        rows[label] = measure(sim, held, ref)
        print(f"{label}: {rows[label]}", flush=True)
    costly = costliest_weights(sim, held, ref, 10)
    print("costliest int8 weights (scores dB gained left float):", [(n, round(g, 2)) for n, g in costly], flush=True)
    sim.float_weights = {id(sim.convs[name]) for name, _ in costly}
    rows["all int8 but the 10 costliest weights"] = measure(sim, held, ref)
    print(f"all int8 but the 10 costliest weights: {rows['all int8 but the 10 costliest weights']}", flush=True)
    sim.float_weights = set()
    if args.qat_steps:
        train_for_int8(sim, cal, cal_ref, args.qat_steps, args.lr, lambda s: print(s, flush=True))
        sim.calibrate(cal)
        label = f"all int8 after {args.qat_steps} QAT steps (lr {args.lr:g}), ranges measured again"
        rows[label] = measure(sim, held, ref)
        print(f"{label}: {rows[label]}", flush=True)


if __name__ == "__main__":
    main()
