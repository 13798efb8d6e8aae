"""Small models and helpers for the quantization tests, built in code (a uniquely named module, not
conftest.py: several test folders have a conftest.py, so `from conftest import` would clash)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from edge_export.config import InputSpec


class QuantCNN(nn.Module):
    """Conv-BN-ReLU, strided conv, pooling, linear head: what PT2E and both recipes handle."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


class PadResidual(nn.Module):
    """A conv output read both by a (zero) pad and by a residual add, as in Hugging Face's
    MobileNetV2 with tf_padding. litert-torch 0.10 failed to lower its PT2E graph ('Attempting to
    convert non-NHWC compatible node to NHWC') while the residual ADD was left in float; since the
    PT2E backend restores the metadata that lets the ADD be annotated, it lowers, fully integer."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.reduce = nn.Conv2d(8, 8, 1)
        self.expand = nn.Conv2d(8, 8, 1)
        self.project = nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.reduce(torch.relu(self.stem(x)))
        z = self.project(torch.relu(self.expand(F.pad(y, (0, 0, 0, 0)))))
        return y + z


class TinyEncoder(nn.Module):
    """One transformer encoder layer: PT2E leaves LayerNorm/softmax/matmuls in float."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


CNN_SPEC = InputSpec((1, 3, 16, 16), name="image")


class GatedConv(nn.Module):
    """A GLU-style gate, ``a * sigmoid(b)`` over the two halves of a conv's channels (as in gated
    convolutions and squeeze-excite blocks). litert-torch 0.10's PT2E gives the LOGISTIC output
    a scale other than 1/256, which the LiteRT int8 kernel refuses at load time: a real PT2E
    failure, on which the flatbuffer backend still gives a fully integer model."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.out = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.chunk(self.conv(x), 2, dim=1)
        return self.out(a) * torch.sigmoid(b)


class GroupNormBlock(nn.Module):
    """conv -> GroupNorm -> ReLU: PT2E leaves the GroupNorm in float, the flatbuffer recipe does not."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.conv(x)))


def make(cls: type[nn.Module], seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = cls().eval()
    # Non-trivial BatchNorm statistics, so that folding them is actually exercised.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model


def heldout(spec: InputSpec, n: int = 8, seed: int = 123) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(spec.shape).astype(np.float32) for _ in range(n)]


def torch_outputs(model: nn.Module, xs: list[np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        return np.concatenate([model(torch.from_numpy(x)).numpy() for x in xs])


def tflite_outputs(model_bytes, xs: list[np.ndarray]) -> np.ndarray:
    from edge_export.runtime.interpreter import TFLiteRunner

    runner = TFLiteRunner(model_bytes)
    return np.concatenate([runner.run([x])[0] for x in xs])


class Residual(nn.Module):
    """ResNet-style block, ``relu(x + f(x))``: plain litert-torch PT2E under non-strict export left
    the residual ADD in float; the PT2E backend now quantizes it (see passes/fx/restore_source_functions_pass.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        return torch.relu(y + self.body(y))


class RmsNormed(nn.Module):
    """A projection and an RMSNorm written out: y * RSQRT(MEAN(y * y) + eps), on (1, 8, 16) inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)


class Mlp(nn.Module):
    """Two linear layers with a ReLU between: tensors of int16 headroom (int16_headroom.py) to name."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(16, 64)
        self.head = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.hidden(x))).flatten(1)
