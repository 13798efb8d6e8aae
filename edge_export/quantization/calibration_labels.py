"""Labels beside the calibration data, and the held-out part accuracy is measured on.

Two forms:
- an image folder with one sub-folder per class: the class name is the sub-folder's name, and the
  sorted names give the class indices (unless ``--labels`` maps names to indices: validators/accuracy.py);
  the files are taken class by class in turn (one of each class, then the next of each...), so that
  ``--calibration-samples`` reads a balanced subset;
- an ``.npz`` with a ``labels`` array: one non-negative integer class index per sample.

With labels, a fixed fraction of every class (``--holdout-fraction``, 0.2 by default) is held out,
spread evenly over the class's samples in their order: deterministic, and disjoint from the samples
calibrated on. Parity and accuracy run on that part.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CalibrationDataError

__all__ = ["DEFAULT_HOLDOUT_FRACTION", "LABELS_KEY", "HeldOutLabels", "checked_labels", "interleave_classes", "labelled_images", "split_labelled"]

LABELS_KEY = "labels"
DEFAULT_HOLDOUT_FRACTION = 0.2
_HINT_LABELS = f"Save the '{LABELS_KEY}' array as integers, one class index (0, 1, ...) per sample, e.g. np.savez(f, x=x, labels=y.astype(np.int64))."


@dataclass(frozen=True)
class HeldOutLabels:
    """The labels of the held-out samples, in their order, and what they came from."""

    labels: tuple[int, ...]
    class_names: tuple[str, ...] | None  # the class sub-folders' names (sorted), None for an .npz
    source: str
    holdout_fraction: float
    calibration_samples: int  # how many samples of the same data were calibrated on instead


def checked_labels(arr: np.ndarray, origin: str, samples: int) -> tuple[int, ...]:
    """An .npz's ``labels`` array as class indices, or a CalibrationDataError naming what is wrong."""
    if arr.ndim != 1:
        raise CalibrationDataError(f"The labels array {origin} has shape {tuple(arr.shape)}; it must be one-dimensional.", _HINT_LABELS)
    if arr.dtype.kind not in "iu":
        raise CalibrationDataError(f"The labels array {origin} has dtype {arr.dtype}; class indices are integers.", _HINT_LABELS)
    if len(arr) != samples:
        raise CalibrationDataError(
            f"The labels array {origin} holds {len(arr)} labels for {samples} samples; each sample needs one.", _HINT_LABELS
        )
    if len(arr) and int(arr.min()) < 0:
        raise CalibrationDataError(f"The labels array {origin} holds a negative class index ({int(arr.min())}).", _HINT_LABELS)
    return tuple(int(v) for v in arr)


def labelled_images(folder: Path, classes: list[tuple[str, list[Path]]], suffixes: tuple[str, ...]) -> tuple[list[Path], tuple[int, ...], tuple[str, ...]]:
    """A labelled folder's image files (interleave_classes), their class indices and the class names."""
    files, labels = interleave_classes(classes)
    others = [f for f in files if f.suffix.lower() not in suffixes]
    if others or not files:
        raise CalibrationDataError(
            f"The class folders of {folder} hold {f'{others[0]}, which is not a JPEG/PNG image' if others else 'no images'}.",
            "A labelled folder holds one sub-folder of JPEG/PNG images per class, and nothing else.",
        )
    return files, tuple(labels), tuple(name for name, _ in classes)


def interleave_classes(classes: list[tuple[str, list[Path]]]) -> tuple[list[Path], list[int]]:
    """The class folders' files taken one of each class in turn, and each file's class index."""
    files: list[Path] = []
    labels: list[int] = []
    longest = max((len(f) for _, f in classes), default=0)
    for rank in range(longest):
        for index, (_, members) in enumerate(classes):
            if rank < len(members):
                files.append(members[rank])
                labels.append(index)
    return files, labels


def heldout_positions(labels: tuple[int, ...], fraction: float) -> list[int]:
    """The positions held out: within each class, every sample whose rank r has
    floor((r + 1) * fraction) > floor(r * fraction), i.e. that fraction spread evenly."""
    ranks: dict[int, int] = {}
    chosen = []
    for position, label in enumerate(labels):
        r = ranks.get(label, 0)
        ranks[label] = r + 1
        if int((r + 1) * fraction) > int(r * fraction):
            chosen.append(position)
    return chosen


def split_labelled(data: Any, fraction: float) -> tuple[Any, Any, HeldOutLabels]:
    """(calibration part, held-out part, the held-out labels) of a labelled CalibrationSet (calibration.py
    imports this module, so the type is not named here)."""
    from dataclasses import replace

    labels = data.labels or ()
    held = set(heldout_positions(labels, fraction))
    if not held or len(held) == len(labels):
        raise CalibrationDataError(
            f"The labelled data {data.source} holds {len(labels)} samples; holding out {fraction:g} of each class "
            f"leaves {'none' if not held else 'all'} of them for the accuracy check.",
            "Add samples (a few per class at least), or change --holdout-fraction.",
        )
    kept = [i for i in range(len(labels)) if i not in held]
    order = sorted(held)

    def part(positions: list[int], source: str) -> Any:
        return replace(data, samples=tuple(data.samples[i] for i in positions), source=source, labels=tuple(labels[i] for i in positions))

    heldout = part(order, f"{data.source} (held out)")
    info = HeldOutLabels(heldout.labels or (), data.class_names, data.source, fraction, len(kept))
    return part(kept, data.source), heldout, info
