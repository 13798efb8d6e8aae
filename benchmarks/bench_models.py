"""Architectures for the benchmarks, built in code (no downloads)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testing_models, shared with the tests
from testing_models import BasicBlock, InvertedResidual  # noqa: E402


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


class ResNet18(nn.Module):
    """ResNet-18 layout (11.7 M parameters), written out so no torchvision is needed."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean(dim=(2, 3)))


# MobileNetV2's block table (expansion t, channels c, repeats n, first stride s) at width 1.0.
MOBILENETV2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018; torchvision's layout without dropout): depthwise convs, ReLU6,
    inverted residuals. Width 1.0 is the published network (3.5 M parameters); ``width=0.5``
    halves every channel count (and the last conv's, unlike the paper, which keeps 1280)."""

    def __init__(self, width: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()

        def ch(c: int) -> int:
            return max(8, int(c * width + 4) // 8 * 8)  # channels rounded to multiples of 8

        stem, last = ch(32), ch(1280)
        layers = [nn.Conv2d(3, stem, 3, 2, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU6()]
        cin = stem
        for t, c, n, s in MOBILENETV2_BLOCKS:
            for i in range(n):
                layers.append(InvertedResidual(cin, ch(c), s if i == 0 else 1, t))
                cin = ch(c)
        layers += [nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(last, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).mean(dim=(2, 3)))


class MobileNetV2Like(MobileNetV2):
    """MobileNetV2 at width 0.5 (1.2 M parameters): the narrow variant the first benchmarks used."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__(width=0.5, num_classes=num_classes)


class SmallTransformer(nn.Module):
    """A 4-layer transformer encoder over 64 tokens of width 128 with a classification head."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


ARCHITECTURES = {
    "small_cnn": (SmallCNN, (1, 3, 64, 64)),
    "resnet18": (ResNet18, (1, 3, 224, 224)),
    "mobilenetv2": (MobileNetV2, (1, 3, 224, 224)),
    "mobilenetv2_like": (MobileNetV2Like, (1, 3, 224, 224)),
    "transformer": (SmallTransformer, (1, 64, 128)),
}


def set_batchnorm_statistics(model: nn.Module, shape: tuple[int, ...], batches: int = 2, batch_size: int = 4) -> nn.Module:
    """Give every BatchNorm the running statistics of random inputs, as training would.

    With default initialisation (running mean 0, variance 1) activations shrink layer after layer:
    the MobileNetV2-style model's output is then its classifier bias for every input, which makes
    parity numbers (SQNR, cosine) meaningless. Statistics gathered in train mode keep each layer's
    activations at unit scale, as in a trained network.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model.eval()
    gen = torch.Generator().manual_seed(1234)
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the batches
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn((batch_size, *shape[1:]), generator=gen))
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    return model.eval()


def build(name: str, shape: tuple[int, ...] | None = None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (random weights, BatchNorm statistics of random inputs) and an example input."""
    cls, default_shape = ARCHITECTURES[name]
    shape = tuple(shape or default_shape)
    torch.manual_seed(0)
    model = set_batchnorm_statistics(cls(), shape)
    return model, (torch.randn(*shape),)
