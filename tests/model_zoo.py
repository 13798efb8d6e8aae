"""Small models built in code for the tests (no downloads). SmallCNN lives in the repository's
testing_models.py (a benchmark uses it too); the classes defined here are named by their source file
in tests that check error messages (model_zoo.py), so they stay here."""

from __future__ import annotations

import torch
from torch import nn

from testing_models import SmallCNN, small_cnn

__all__ = ["ComplexOp", "DataDependent", "Detector", "NamedIO", "SmallCNN", "TwoInputs", "TwoOutputs", "small_cnn"]


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


class NamedIO(nn.Module):
    """Named inputs and a dict of named outputs, as a Hugging Face model has (issue 10's names)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = nn.Linear(8, 4)
        self.project = nn.Linear(8, 6)

    def forward(self, pixel_values: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        hidden = torch.relu(pixel_values + attention_mask)
        return {"logits": self.head(hidden), "embedding": self.project(hidden)}


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


class Detector(nn.Module):
    """A YOLO-like head: one [1, 4 + nc, anchors] output, boxes 0-320 pixels and scores 0-1."""

    def __init__(self, nc: int = 6) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.box, self.cls = nn.Conv2d(8, 4, 1), nn.Conv2d(8, nc, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.body(x)
        return torch.cat([torch.sigmoid(self.box(f)) * 320, torch.sigmoid(self.cls(f))], 1).flatten(2)
