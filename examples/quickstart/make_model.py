"""Build a small image classifier and save it as an ExportedProgram archive (cnn.pt2) beside this file.

    python examples/quickstart/make_model.py
    edge-export examples/quickstart/cnn.pt2 --channels-last
"""

from pathlib import Path

import torch
from torch import nn


class TinyClassifier(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pool(self.features(x)).flatten(1))


def main() -> None:
    torch.manual_seed(0)
    model = TinyClassifier().eval()
    example = (torch.randn(1, 3, 32, 32),)
    out = Path(__file__).with_name("cnn.pt2")
    torch.export.save(torch.export.export(model, example), out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
