"""Small models built in code for the per-layer parity tests (a uniquely named module, so that
test files can import it whatever other conftest.py files are loaded)."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

INPUT_SHAPE = (1, 3, 12, 16)  # not square, so H and W cannot be confused


class Block(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)
        self.bn = nn.BatchNorm2d(ch)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x))) + x


class Net(nn.Module):
    """Conv+BN+ReLU in a Sequential (fused into one CONV_2D), a residual block, a bare 1x1 conv."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = Block(8)
        self.proj = nn.Conv2d(8, 12, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(12, 10)

    def forward(self, x):
        x = self.proj(self.block(self.stem(x)))
        return self.fc(self.pool(x).flatten(1))


def make_net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    net = Net()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):  # non-trivial statistics, so folding them matters
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return net.eval()


def samples_for(shape: tuple[int, ...], n: int, seed: int) -> list[tuple[np.ndarray, ...]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape).astype(np.float32),) for _ in range(n)]



class Deep(nn.Module):
    """Nested Sequentials, a ModuleList with residuals, a depthwise conv + BN with no activation."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU6()),
            nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8), nn.Hardswish()),
            nn.MaxPool2d(2),
        )
        self.layers = nn.ModuleList([nn.Sequential(nn.Conv2d(8, 8, 1), nn.GELU()) for _ in range(2)])
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 6 * 8, 10), nn.Softmax(-1))

    def forward(self, x):
        x = self.features(x)
        for layer in self.layers:
            x = layer(x) + x
        return self.head(x)


def make_deep(seed: int = 0) -> Deep:
    torch.manual_seed(seed)
    deep = Deep()
    bn = deep.features[1][1]
    with torch.no_grad():  # a BN far from identity: comparing the conv before it would fail
        bn.running_mean.uniform_(-1.0, 1.0)
        bn.running_var.uniform_(0.3, 3.0)
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.uniform_(-1.0, 1.0)
    return deep.eval()


def pt2e_int8(module: nn.Module, example: tuple, calibration: list) -> bytes:
    """PT2E static int8 (per-channel weights) through the product's own recipe."""
    from litert_torch.quantize.quant_config import QuantConfig

    from edge_export.config import QuantizeMode
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization.pt2e import prepare_and_convert_pt2e

    batches = [(torch.from_numpy(x),) for (x,) in calibration]
    graph, quantizer = prepare_and_convert_pt2e(copy.deepcopy(module), example, QuantizeMode.INT8, batches)
    return convert_module(graph, example, quant_config=QuantConfig(pt2e_quantizer=quantizer))
