"""Small MobileNetV2- and ResNet-style classifiers at module level, so the CLI can load them as a
pickle (the classes must be importable) and as `edgetpu_cli_models:tiny_resnet` references.

The blocks (from testing_models.py) are those of benchmarks/bench_models.py (the 64x64
measurements): BatchNorm after every conv, ReLU6 and depthwise convs with inverted residuals, functional ReLU after the residual add,
a padded max-pool stem, a global mean written as ``x.mean(dim=(2, 3))``.
"""

from __future__ import annotations

import torch
from torch import nn

from testing_models import BasicBlock, InvertedResidual, random_batchnorm_stats


class TinyMobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 8) -> None:
        super().__init__()
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(3, w, 3, 2, 1, bias=False),
            nn.BatchNorm2d(w),
            nn.ReLU6(),
            InvertedResidual(w, w, 1, 1),
            InvertedResidual(w, 2 * w, 2, 4),
            InvertedResidual(2 * w, 2 * w, 1, 4),
            nn.Conv2d(2 * w, 8 * w, 1, bias=False),
            nn.BatchNorm2d(8 * w),
            nn.ReLU6(),
        )
        self.classifier = nn.Linear(8 * w, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).mean(dim=(2, 3)))


class TinyResNet(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 8) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(BasicBlock(w, w, 1), BasicBlock(w, 2 * w, 2), BasicBlock(2 * w, 2 * w, 1))
        self.fc = nn.Linear(2 * w, num_classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean(dim=(2, 3)))


def _with_batchnorm_stats(module: nn.Module, seed: int = 0) -> nn.Module:
    """Seeded weights and non-trivial BatchNorm statistics, as a trained network would have."""
    return random_batchnorm_stats(module, seed).eval()


def tiny_mobilenet_v2() -> TinyMobileNetV2:
    torch.manual_seed(0)
    return _with_batchnorm_stats(TinyMobileNetV2())


def tiny_resnet() -> TinyResNet:
    torch.manual_seed(0)
    return _with_batchnorm_stats(TinyResNet())


FACTORIES = {"mobilenet_v2": tiny_mobilenet_v2, "resnet": tiny_resnet}
