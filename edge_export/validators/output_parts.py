"""Parts of one output whose value ranges differ by a large factor, judged one by one.

A detector's head often returns one tensor holding boxes in pixels (0-480) and class scores (0-1):
an int8 output has one scale for both, so the scores round to zero while the SQNR of the whole
tensor, which the boxes dominate, reads 40 dB. Parity therefore looks for such parts in PyTorch's own
outputs on the parity samples and judges each part separately (output_parity.parts in the report).

The search is small and bounded:

- along each axis of the output but the first (the batch axis; a 1-D output has no parts), at most
  MAX_PART_AXES of them, each index (row, channel, ...) gets PyTorch's max |x| over everything else;
- those values (the non-zero ones) are sorted and the largest ratio between two neighbours is the
  gap (the lowest of equal ratios); the axis has parts only when the gap is PART_RANGE_FACTOR (10)
  or more (exactly 10x counts). Indices at or below the gap are *small*, the others *large*: the two
  groups' ranges differ 10x or more everywhere, not just at their extremes, so logits whose classes
  merely spread from 0.1 to 2 are not split;
- the parts are the contiguous runs of small and of large indices, in order;
- an axis splits when that gives 2 to MAX_PARTS_PER_AXIS parts; more runs than that is data whose
  ranges vary along the axis, not an output made of parts;
- a part that is zero everywhere in PyTorch is not judged (no signal to measure its noise against;
  the whole output's max abs error still sees it); an axis left with fewer than 2 parts is not split;
- an output holding NaN or Inf has no parts (it fails as a whole already).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MAX_PART_AXES", "MAX_PARTS_PER_AXIS", "PART_RANGE_FACTOR", "PartSlice", "find_parts", "worst_sqnr_db"]

PART_RANGE_FACTOR = 10.0
MAX_PART_AXES = 4
MAX_PARTS_PER_AXIS = 8


@dataclass(frozen=True)
class PartSlice:
    """Indices ``start:stop`` along ``axis`` of an output's shape (axis 0 is the batch axis)."""

    axis: int
    start: int
    stop: int
    reference_max_abs: float  # PyTorch's max |x| over the part

    def label(self, name: str, ndim: int) -> str:
        """The part as numpy indexing, e.g. ``output_0[:, 4:84, :]``."""
        return f"{name}[{', '.join(f'{self.start}:{self.stop}' if i == self.axis else ':' for i in range(ndim))}]"

    def take(self, stacked: np.ndarray) -> np.ndarray:
        """This part of ``stacked`` (samples first, then the output's axes)."""
        index = [slice(None)] * stacked.ndim
        index[self.axis + 1] = slice(self.start, self.stop)
        return stacked[tuple(index)]


def _runs(small: np.ndarray) -> list[tuple[int, int]]:
    """The contiguous runs of equal values of a boolean profile, as (start, stop)."""
    edges = [0, *(int(i) + 1 for i in np.flatnonzero(small[1:] != small[:-1])), len(small)]
    return list(zip(edges[:-1], edges[1:]))


def _axis_parts(magnitude: np.ndarray, axis: int) -> list[PartSlice]:
    """The parts along one axis of ``magnitude`` (|PyTorch output|, samples first), or none."""
    others = tuple(i for i in range(magnitude.ndim) if i != axis + 1)
    profile = magnitude.max(axis=others)
    levels = np.unique(profile[profile > 0.0])  # sorted
    if levels.size < 2:
        return []
    ratios = levels[1:] / levels[:-1]
    gap = int(np.argmax(ratios))  # the first of equal ratios: the lowest gap
    if ratios[gap] < PART_RANGE_FACTOR:
        return []
    runs = _runs(profile <= levels[gap])
    if not 2 <= len(runs) <= MAX_PARTS_PER_AXIS:
        return []
    parts = [PartSlice(axis, a, b, float(profile[a:b].max())) for a, b in runs]
    judged = [p for p in parts if p.reference_max_abs > 0.0]
    return judged if len(judged) >= 2 else []


def find_parts(stacked: np.ndarray) -> tuple[PartSlice, ...]:
    """The parts of one output, from PyTorch's values on every sample (``stacked``: samples first).
    Empty for an ordinary output."""
    reference = np.asarray(stacked, dtype=np.float64)
    if reference.ndim < 3 or reference.size == 0 or not np.all(np.isfinite(reference)):
        return ()
    magnitude = np.abs(reference)
    parts: list[PartSlice] = []
    for axis in range(1, min(reference.ndim - 1, 1 + MAX_PART_AXES)):
        if reference.shape[axis + 1] >= 2:
            parts += _axis_parts(magnitude, axis)
    return tuple(parts)


def worst_sqnr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    """The SQNR of one output (samples first) and of each of its parts, the worst of them (NaN
    first): what quantization's choices aim at, so that a backend or a mixed-precision search is
    not satisfied by a whole-tensor SQNR that the boxes of a detector dominate while its scores are
    lost (parity fails on the part)."""
    import math

    from .metrics import sqnr_db

    reference, candidate = np.asarray(reference), np.asarray(candidate).reshape(np.shape(reference))
    values = [sqnr_db(reference.ravel(), candidate.ravel())]
    # Only an output with two axes or more beyond the batch (features by positions, as a detector's
    # rows by anchors): one vector per sample is an embedding or a set of logits, which parity
    # judges whole (an embedding's direction; quantization does not know the kind yet), and a
    # text encoder's near-zero dimensions would otherwise read as a lost part (MiniLM: 0.0 dB).
    if sum(1 for n in reference.shape[1:] if n >= 2) >= 2:
        values += [sqnr_db(part.take(reference).ravel(), part.take(candidate).ravel()) for part in find_parts(reference)]
    return float(min(values, key=lambda v: -math.inf if math.isnan(v) else v))
