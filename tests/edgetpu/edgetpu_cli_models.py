"""Small MobileNetV2- and ResNet-style classifiers at module level, so the CLI can load them as a
pickle (the classes must be importable) and as `edgetpu_cli_models:tiny_resnet` references.

The layer patterns are those of benchmarks/bench_models.py (the 64x64 measurements): BatchNorm after
every conv, ReLU6 and depthwise convs with inverted residuals, functional ReLU after the residual add,
a padded max-pool stem, a global mean written as ``x.mean(dim=(2, 3))``.
"""

from __future__ import annotations

import torch
from torch import nn


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.block(x) if self.use_res else self.block(x)


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


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + identity)


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
    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return module.eval()


def tiny_mobilenet_v2() -> TinyMobileNetV2:
    torch.manual_seed(0)
    return _with_batchnorm_stats(TinyMobileNetV2())


def tiny_resnet() -> TinyResNet:
    torch.manual_seed(0)
    return _with_batchnorm_stats(TinyResNet())


FACTORIES = {"mobilenet_v2": tiny_mobilenet_v2, "resnet": tiny_resnet}
