"""The small model the pass tests share: built in code."""

from __future__ import annotations

import torch

SHAPE = (1, 3, 8, 8)


class TwoBranches(torch.nn.Module):
    """Two convolutions of the input added: operators that do not depend on each other, so a
    reorder has somewhere to move them, and per-channel weights whose zero points repeat."""

    def __init__(self) -> None:
        super().__init__()
        self.left = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.right = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return torch.relu(self.left(x)) + self.right(x)
