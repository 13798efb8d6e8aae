"""Small models built in code for the tests (no downloads)."""

from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)).flatten(1))


class TwoInputs(nn.Module):
    """Image plus a feature vector."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 + 5, 3)

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        pooled = self.conv(image).mean(dim=(2, 3))
        return self.fc(torch.cat([pooled, extra], dim=1))


class TwoOutputs(nn.Module):
    """A feature map and logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor):
        fmap = torch.relu(self.conv(x))
        return fmap, self.fc(fmap.mean(dim=(2, 3)))


class DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # control flow on a tensor value: torch.export cannot trace this
            return x * 2
        return x - 1


class ComplexOp(nn.Module):
    """Uses torch.fft, whose complex tensors have no LiteRT lowering."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.fft(self.proj(x)).real


def small_cnn() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN().eval()
