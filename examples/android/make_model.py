"""Build a small image classifier whose forward() names its input and outputs, and save it as an
ExportedProgram archive (classifier.pt2) beside this file, with a labels file (labels.txt).

    python examples/android/make_model.py
    edge-export examples/android/classifier.pt2 --target gpu --runtime both --emit-test-vectors

README, "The Android path", walks through the rest.
"""

from pathlib import Path

import torch
from torch import nn

LABELS = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


class Classifier(nn.Module):
    def __init__(self, num_classes: int = len(LABELS)) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        embedding = self.pool(self.features(pixel_values)).flatten(1)
        return {"logits": self.classifier(embedding), "embedding": embedding}


def main() -> None:
    torch.manual_seed(0)
    model = Classifier().eval()
    example = (torch.randn(1, 3, 32, 32),)
    folder = Path(__file__).parent
    torch.export.save(torch.export.export(model, example), folder / "classifier.pt2")
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    print(f"wrote {folder / 'classifier.pt2'} and {folder / 'labels.txt'}")


if __name__ == "__main__":
    main()
