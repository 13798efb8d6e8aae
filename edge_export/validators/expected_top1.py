"""The top-1 agreement a classifier can be expected to keep on the user's data, from few samples.

Eight parity samples cannot see a top-1 flip rate of 10%: EfficientNet-Lite0 on the Edge TPU flips
9.4% of 96 held-out photo crops, and one flip in eight samples passes any gate that allows one. Two
things can be measured well, though: how much the exported model moves each logit (eight samples of
a thousand logits each), and how close the user's inputs sit to a decision (PyTorch's margins
between its top class and every other, on every real sample the export has: the calibration data
and the held-out samples). A sample flips when the error on the difference of two logits exceeds
their margin; taking that error as normal, with the spread measured on the parity samples, each
sample's chance to flip is the sum over the other classes of the normal tail beyond their margin
(at most 1), and the expected agreement is one less the mean chance.

Measured against the actual agreement on 96 held-out crops (docs/BENCHMARKS.md section 41):
EfficientNet-Lite0 at 21.1 dB (Edge TPU) 0.903 expected, 0.906 actual; at 25.8 dB 0.948 / 0.938;
at 30.4 dB 0.962 / 0.969; the digits CNN at 29.2 dB 0.982 / 0.994.
"""

from __future__ import annotations

import math

import numpy as np

from .metrics import NotComputable

__all__ = ["MAX_MARGIN_ROWS", "expected_top1_agreement"]

# The margins come from at most this many rows (samples x positions): PyTorch runs once more on each
# calibration sample used, and 64 is what the measurements above used (8 parity + 56 calibration).
MAX_MARGIN_ROWS = 64
_ERFC = np.frompyfunc(math.erfc, 1, 1)
# erfc(z) for z >= 6 is below 2e-17: a class that far below the top cannot flip it.
TAIL_CUTOFF = 6.0


def _difference_spread(ref: np.ndarray, out: np.ndarray) -> float:
    """RMS over the rows and the other classes of (error at PyTorch's top class - error at the
    class): the noise a margin must outlast."""
    err = out - ref
    top = np.argmax(ref, axis=1)
    diff = err[np.arange(len(err)), top][:, None] - err
    others = np.ones_like(diff, dtype=bool)
    others[np.arange(len(err)), top] = False
    return float(np.sqrt(np.mean(diff[others] ** 2)))


def _flip_chance(margin_rows: np.ndarray, spread: float) -> np.ndarray:
    """Each row's chance that some other class overtakes PyTorch's top one; classes tied with the
    top are skipped (a tie counts as agreement, as in metrics.topk_agreement), and so are classes
    beyond TAIL_CUTOFF spreads (a tail below 1e-15: a 32k-class vocabulary costs only its near ones)."""
    if spread == 0.0:
        return np.zeros(len(margin_rows))
    z = (margin_rows.max(axis=1, keepdims=True) - margin_rows) / (spread * math.sqrt(2.0))
    near = (z > 0) & (z < TAIL_CUTOFF)
    tails = np.zeros_like(z)
    tails[near] = 0.5 * _ERFC(z[near]).astype(np.float64)
    return np.minimum(1.0, tails.sum(axis=1))


def expected_top1_agreement(ref: np.ndarray, out: np.ndarray, margin_rows: np.ndarray) -> float:
    """``ref``/``out``: PyTorch's and the exported model's outputs on the parity samples, classes on
    the last axis; ``margin_rows``: PyTorch's outputs on every real sample (rows of classes)."""
    r = np.asarray(ref, dtype=np.float64)
    o = np.asarray(out, dtype=np.float64)
    rows = np.asarray(margin_rows, dtype=np.float64)
    if r.ndim == 0 or rows.ndim != 2 or rows.shape[0] == 0:
        raise NotComputable("no real samples to take PyTorch's margins from")
    if not (np.all(np.isfinite(r)) and np.all(np.isfinite(o)) and np.all(np.isfinite(rows))):
        raise NotComputable("the arrays hold NaN or Inf")
    r, o = r.reshape(-1, r.shape[-1]), o.reshape(-1, o.shape[-1])
    if r.shape[1] < 2:
        raise NotComputable(f"{r.shape[1]} class along the last axis: agreement on it means nothing")
    spread = _difference_spread(r[:MAX_MARGIN_ROWS], o[:MAX_MARGIN_ROWS])
    return float(1.0 - np.mean(_flip_chance(rows[:MAX_MARGIN_ROWS], spread)))
